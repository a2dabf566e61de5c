"""MemoryStore: an in-memory experiment store with the operations the Core API and the run lifecycle use.

It implements ``core.CoreStore`` (which holds ``lifecycle.RunStore``) with the rules of
``ExperimentStore`` that those layers rely on, so that their unit tests run without
SQLite, as Determined's ``Dummy*Context`` classes let its Core API be tested without a
master. ``tests/store/test_memory_store.py`` runs the same operations on both and
compares what they read back. Only what crosses a process boundary (a launched
process, a fork) needs the real store.
"""

import dataclasses
import itertools
import json
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator.store import (
    BestValidation,
    CheckpointRecord,
    ExperimentRecord,
    JobRecord,
    MetricKind,
    MetricRecord,
    State,
    StoreLocation,
    TrialRecord,
    TrialRunRecord,
    UnknownIdError,
    trial_checkpoint_dir,
)


class MemoryStore:
    """An experiment store held in dicts; records read back as the real store's frozen records.

    Args:
        files_dir: where the trials' TensorBoard event files and logs go, as beside a real store.
    """

    def __init__(self, files_dir: Union[str, os.PathLike]) -> None:
        self.files_dir = Path(files_dir)
        self.files_dir.mkdir(parents=True, exist_ok=True)
        # The runs' info names it; a file no SQLite store can open, so that code which opens
        # the store by its path, rather than use the client it was handed, fails at once.
        self.path = self.files_dir / "memory-store"
        self.path.write_text("an in-memory store: nothing opens this file\n", encoding="utf-8")
        self.location = StoreLocation(path=self.path)
        self.closed = False
        # Ids count per kind of record, from 1, as SQLite's rowids do.
        self._ids = {kind: itertools.count(1) for kind in ("experiment", "trial", "run", "job")}
        self._experiments: dict[int, ExperimentRecord] = {}
        self._tags: dict[int, str] = {}
        self._trials: dict[int, TrialRecord] = {}
        self._runs: dict[int, TrialRunRecord] = {}
        self._metrics: list[MetricRecord] = []
        self._checkpoints: dict[str, CheckpointRecord] = {}
        self._jobs: dict[int, JobRecord] = {}

    def for_thread(self) -> "MemoryStore":
        """This store: dicts serve every thread."""
        return self

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # Experiments and trials.

    def create_experiment(
        self,
        name: str,
        config: dict[str, Any],
        context_dir: str,
        entrypoint: str,
        slots: int,
        test: bool,
        command: Optional[list[str]] = None,
        hosts: Optional[str] = None,
        run_key: Optional[str] = None,
        trial_class: Optional[dict[str, Any]] = None,
    ) -> int:
        experiment_id = next(self._ids["experiment"])
        self._experiments[experiment_id] = ExperimentRecord(
            id=experiment_id,
            name=name,
            state=State.ACTIVE,
            config=json.loads(json.dumps(config)),
            context_dir=context_dir,
            entrypoint=entrypoint,
            command=None if command is None else list(command),
            slots=slots,
            hosts=hosts,
            test=bool(test),
            created_at=time.time(),
            ended_at=None,
            launcher_pid=os.getpid(),
            launcher_host="localhost",
            run_key=run_key,
            pause_requested_at=None,
            trial_class=trial_class,
        )
        self._tags[experiment_id] = secrets.token_hex(4)
        return experiment_id

    def create_trial(
        self,
        experiment_id: int,
        hparams: dict[str, Any],
        seed: int,
        checkpoint_storage: Union[str, os.PathLike],
        max_batches: Optional[int] = None,
    ) -> int:
        if experiment_id not in self._experiments:
            raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.path}.")
        trial_id = next(self._ids["trial"])
        log_path = self.files_dir / "experiments" / str(experiment_id) / f"trial-{trial_id}" / "output.log"
        tag = self._tags[experiment_id]
        self._trials[trial_id] = TrialRecord(
            id=trial_id,
            experiment_id=experiment_id,
            state=State.ACTIVE,
            hparams=json.loads(json.dumps(hparams)),
            seed=seed,
            checkpoint_dir=str(trial_checkpoint_dir(checkpoint_storage, experiment_id, tag, trial_id)),
            log_path=str(log_path),
            batches_trained=0,
            max_batches=max_batches,
            created_at=time.time(),
            ended_at=None,
        )
        return trial_id

    def experiment(self, experiment_id: int) -> ExperimentRecord:
        if experiment_id not in self._experiments:
            raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.path}.")
        trials = self.trials(experiment_id)
        return dataclasses.replace(
            self._experiments[experiment_id],
            batches_trained=sum(trial.batches_trained for trial in trials),
            max_batches=max((t.max_batches for t in trials if t.max_batches is not None), default=None),
            num_trials=len(trials),
        )

    def experiments(self) -> list[ExperimentRecord]:
        return [self.experiment(experiment_id) for experiment_id in sorted(self._experiments)]

    def trials(self, experiment_id: int) -> list[TrialRecord]:
        return [trial for _, trial in sorted(self._trials.items()) if trial.experiment_id == experiment_id]

    def trial(self, trial_id: int) -> TrialRecord:
        if trial_id not in self._trials:
            raise UnknownIdError(f"There is no trial {trial_id} in the store {self.path}.")
        return self._trials[trial_id]

    def update_experiment(self, experiment_id: int, config: dict[str, Any], slots: int, test: bool) -> None:
        self._update_experiment(experiment_id, config=json.loads(json.dumps(config)), slots=slots, test=bool(test))

    def own_folders(
        self, experiment_id: Optional[int], make: bool = True, trials: Optional[Sequence[TrialRecord]] = None
    ) -> None:
        """Nothing to check: no other store writes in the folders of a store held in memory."""

    def claim(self, experiment_id: int, pid: Optional[int] = None) -> None:
        self._update_experiment(experiment_id, launcher_pid=pid or os.getpid(), pause_requested_at=None)

    def set_state(self, experiment_id: int, state: State) -> None:
        state = State(state)
        ended = time.time() if state.is_final else None
        self._update_experiment(experiment_id, state=state, ended_at=ended)
        if state.is_final:
            for trial in self.trials(experiment_id):
                if trial.state == State.ACTIVE:
                    self._update_trial(trial.id, state=state, ended_at=ended)

    def set_trial_state(self, trial_id: int, state: State) -> None:
        state = State(state)
        self._update_trial(trial_id, state=state, ended_at=time.time() if state.is_final else None)

    def request_pause(self, experiment_id: int) -> None:
        self._update_experiment(experiment_id, pause_requested_at=time.time())

    def set_progress(self, trial_id: int, batches_trained: int, max_batches: Optional[int] = None) -> None:
        changes: dict[str, Any] = {"batches_trained": batches_trained}
        if max_batches is not None:
            changes["max_batches"] = max_batches
        self._update_trial(trial_id, **changes)

    # The search.

    def set_target(self, trial_id: int, target_length: Optional[int], answered_length: Optional[int] = None) -> None:
        """What a search tells a trial (``apply_search_step``'s assignment, for one trial)."""
        changes: dict[str, Any] = {"target_length": target_length}
        if answered_length is not None:
            changes["answered_length"] = answered_length
        self._update_trial(trial_id, **changes)

    def report_search_metric(self, trial_id: int, length: int, metric: Any) -> None:
        self._update_trial(trial_id, reported_length=length, reported_metric=metric)

    # Runs.

    def start_run(self, trial_id: int, start_batches: int = 0) -> int:
        run_id = next(self._ids["run"])
        self._runs[run_id] = TrialRunRecord(
            id=run_id,
            trial_id=trial_id,
            started_at=time.time(),
            ended_at=None,
            state=State.ACTIVE,
            preempted=False,
            exit_status=None,
            error=None,
            start_batches=start_batches,
        )
        return run_id

    def trial_run(self, run_id: int) -> TrialRunRecord:
        if run_id not in self._runs:
            raise UnknownIdError(f"There is no trial run {run_id} in the store {self.path}.")
        return self._runs[run_id]

    def trial_runs(self, trial_id: int) -> list[TrialRunRecord]:
        return [run for _, run in sorted(self._runs.items()) if run.trial_id == trial_id]

    def acknowledge_preemption(self, run_id: int) -> None:
        self._runs[run_id] = dataclasses.replace(self._runs[run_id], preempted=True)

    def record_run_error(self, run_id: int, error: dict[str, Any]) -> None:
        """The first error wins, but one marked ``consequence`` gives way to one that is not (as the store's)."""
        recorded = self._runs[run_id].error
        if recorded is None or (recorded.get("consequence") and not error.get("consequence")):
            self._runs[run_id] = dataclasses.replace(self._runs[run_id], error=json.loads(json.dumps(error)))

    def end_run(self, run_id: int, state: State, exit_status: Optional[int] = None) -> None:
        self._runs[run_id] = dataclasses.replace(
            self._runs[run_id], state=State(state), ended_at=time.time(), exit_status=exit_status
        )

    # Metrics and checkpoints.

    def record_metrics(
        self, trial_id: int, kind: MetricKind, batches: int, metrics: dict[str, Any], run_id: Optional[int] = None
    ) -> None:
        encoded = json.loads(json.dumps(metrics))  # what the store cannot encode fails here too
        self._metrics.append(
            MetricRecord(len(self._metrics) + 1, trial_id, MetricKind(kind), batches, encoded, time.time(), run_id)
        )
        trial = self.trial(trial_id)
        self._update_trial(trial_id, batches_trained=max(trial.batches_trained, batches))

    def metrics(
        self, trial_id: int, kind: MetricKind, run_id: Optional[int] = None, after_id: int = 0
    ) -> list[MetricRecord]:
        """As the store's: without those a later run of the trial trained again from an earlier checkpoint."""
        found = [
            metric
            for metric in self._metrics
            if metric.trial_id == trial_id
            and metric.kind == MetricKind(kind)
            and metric.id > after_id
            and (run_id is None or metric.run_id == run_id)
            and not self._rolled_back(metric)
        ]
        return sorted(found, key=lambda metric: (metric.batches, metric.id))

    def _rolled_back(self, metric: MetricRecord) -> bool:
        return any(
            later.trial_id == metric.trial_id
            and metric.run_id is not None
            and later.id > metric.run_id
            and later.start_batches < metric.batches
            for later in self._runs.values()
        )

    def record_checkpoint(
        self,
        trial_id: int,
        uuid: str,
        batches: int,
        path: str,
        size_bytes: int,
        metadata: dict[str, Any],
        run_id: Optional[int] = None,
    ) -> None:
        metadata = json.loads(json.dumps(metadata))
        self._checkpoints[uuid] = CheckpointRecord(
            uuid=uuid,
            trial_id=trial_id,
            batches=batches,
            state="COMPLETED",
            validation_metrics=metadata.get("validation_metrics"),
            size_bytes=size_bytes,
            path=path,
            created_at=time.time(),
            run_id=run_id,
            metadata=metadata,
        )

    def record_checkpoint_validation(
        self, uuid: str, metrics: dict[str, Any], size_bytes: Optional[int] = None
    ) -> None:
        record = self._checkpoints.get(uuid)
        if record is not None:
            metrics = json.loads(json.dumps(metrics))
            self._checkpoints[uuid] = dataclasses.replace(
                record,
                validation_metrics=metrics,
                size_bytes=record.size_bytes if size_bytes is None else size_bytes,
                metadata={**record.metadata, "validation_metrics": metrics},
            )

    def mark_checkpoints_deleted(self, uuids: list[str]) -> None:
        for uuid in uuids:
            if uuid in self._checkpoints:
                self._checkpoints[uuid] = dataclasses.replace(self._checkpoints[uuid], state="DELETED")

    def checkpoints(
        self, experiment_id: int, include_deleted: bool = False, trial_id: Optional[int] = None
    ) -> list[CheckpointRecord]:
        found = [
            record
            for record in self._checkpoints.values()
            if self.trial(record.trial_id).experiment_id == experiment_id
            and (trial_id is None or record.trial_id == trial_id)
            and (include_deleted or record.state == "COMPLETED")
        ]
        return sorted(found, key=lambda record: (record.batches, record.created_at))

    def checkpoint(self, uuid: str) -> CheckpointRecord:
        if uuid not in self._checkpoints:
            raise UnknownIdError(f"There is no checkpoint {uuid} in the store {self.path}.")
        return self._checkpoints[uuid]

    def best_checkpoints(self, experiment_id: int, metric: str, smaller_is_better: bool, count: int) -> set[str]:
        ranked = []
        for record in self.checkpoints(experiment_id):
            value = (record.validation_metrics or {}).get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                ranked.append((value if smaller_is_better else -value, -record.created_at, record.uuid))
        return {uuid for _, _, uuid in sorted(ranked)[:count]}

    def best_validation(self, experiment_id: int, trial_id: Optional[int] = None) -> Optional[BestValidation]:
        experiment = self.experiment(experiment_id)
        metric, smaller = experiment.searcher_metric, experiment.smaller_is_better
        best: Optional[BestValidation] = None
        for record in self._metrics:
            trial = self.trial(record.trial_id)
            if trial.experiment_id != experiment_id or record.kind != MetricKind.VALIDATION:
                continue
            if (trial_id is not None and record.trial_id != trial_id) or self._rolled_back(record):
                continue
            value = record.metrics.get(metric)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
                continue
            if best is None or (value <= best.value if smaller else value >= best.value):
                best = BestValidation(metric, float(value), record.batches, record.trial_id)
        return best

    # Jobs.

    def create_job(
        self, name: str, config: dict[str, Any], context_dir: str, command: list[str], slots: int, kind: str = ""
    ) -> int:
        job_id = next(self._ids["job"])
        self._jobs[job_id] = JobRecord(
            id=job_id,
            name=name,
            kind=kind or "BATCH_INFERENCE",
            state=State.ACTIVE,
            config=json.loads(json.dumps(config)),
            context_dir=context_dir,
            command=list(command),
            slots=slots,
            log_path=str(self.files_dir / "jobs" / str(job_id) / "output.log"),
            created_at=time.time(),
            ended_at=None,
            exit_status=None,
            error=None,
            launcher_pid=os.getpid(),
            launcher_host="localhost",
        )
        return job_id

    def end_job(
        self, job_id: int, state: State, exit_status: Optional[int] = None, error: Optional[dict[str, Any]] = None
    ) -> None:
        self._jobs[job_id] = dataclasses.replace(
            self._jobs[job_id], state=State(state), ended_at=time.time(), exit_status=exit_status, error=error
        )

    def job(self, job_id: int) -> JobRecord:
        if job_id not in self._jobs:
            raise UnknownIdError(f"There is no job {job_id} in the store {self.path}.")
        return self._jobs[job_id]

    def jobs(self) -> list[JobRecord]:
        return [job for _, job in sorted(self._jobs.items())]

    # Updating a frozen record.

    def _update_experiment(self, experiment_id: int, **changes: Any) -> None:
        if experiment_id not in self._experiments:
            raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.path}.")
        self._experiments[experiment_id] = dataclasses.replace(self._experiments[experiment_id], **changes)

    def _update_trial(self, trial_id: int, **changes: Any) -> None:
        self._trials[trial_id] = dataclasses.replace(self.trial(trial_id), **changes)
