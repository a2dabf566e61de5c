"""SearchRunner: drives an experiment's search method and records every step in the store.

The search method decides; the runner carries out its operations as store records
(new trials, the length each trains towards) and feeds it the trials' events. Each
event and the operations it yields are recorded in one transaction with the method's
state, so an experiment paused, or killed at any moment, resumes its search exactly
where it was.
"""

import logging
import math
from pathlib import Path
from typing import Any, Optional

from det_estimator.config import ExperimentConfig
from det_estimator.lifecycle import ErrorKind, RunError, RunLifecycle
from det_estimator.searcher import (
    Close,
    Create,
    ExitedReason,
    Operation,
    SearcherError,
    SearchMethod,
    Shutdown,
    ValidateAfter,
    make_search_method,
)
from det_estimator.store import (
    Assignment,
    ExperimentRecord,
    ExperimentStore,
    MetricKind,
    NewTrial,
    SearchState,
    State,
    TrialRecord,
)

logger = logging.getLogger("det_estimator.orchestration")


class SearchRunner:
    """The search of one experiment, started or resumed from the store.

    Args:
        store: the experiment store.
        experiment: the experiment.
        config: its validated config.
        checkpoint_storage: where its trials' checkpoints go (absolute).
        retry: a failed single-trial experiment is being resumed: its trial runs again
            from its latest checkpoint.
    """

    def __init__(
        self,
        store: ExperimentStore,
        experiment: ExperimentRecord,
        config: ExperimentConfig,
        checkpoint_storage: Path,
        retry: bool = False,
    ) -> None:
        self._store = store
        self._experiment_id = experiment.id
        self._config = config
        self._storage = checkpoint_storage
        self._method: SearchMethod = make_search_method(config)
        self.shutdown = False
        self.failed = False
        self.shutdown_reason = ""  # why the search ended before trying all its trials, if it did
        saved = store.searcher_state(experiment.id)
        if retry and config.searcher.name == "single" and saved is not None and saved["failed"]:
            for trial in store.trials(experiment.id):
                store.set_search_state(trial.id, SearchState.QUEUED)
            saved = None
        if saved is not None and self._load(saved):
            return
        self._adopt_orphan(store.trials(experiment.id))
        self._apply(self._method.initial_operations())

    def _adopt_orphan(self, trials: list[TrialRecord]) -> None:
        """A single trial recorded outside a search (a plain script's run, an older store) becomes its trial 0."""
        if self._config.searcher.name == "single" and len(trials) == 1 and trials[0].request_id is None:
            self._store.adopt_trial(trials[0].id, 0)

    def _load(self, saved: dict) -> bool:
        """Restores the saved search; False when the config changed under a single-trial search (it restarts)."""
        try:
            self._method.load_state_dict(saved["method"])
        except SearcherError:
            if self._config.searcher.name != "single":
                raise
            # run_trial runs again under a longer length: the one trial continues with it.
            self._method = make_search_method(self._config)
            return False
        self.shutdown, self.failed = saved["shutdown"], saved["failed"]
        self.shutdown_reason = saved.get("shutdown_reason", "")
        return True

    @property
    def progress(self) -> float:
        """How much of the search is done, from 0 to 1."""
        return self._method.progress()

    def on_reported(self, trial: TrialRecord) -> None:
        """A trial completed its operation; the search answers it (another one, or none).

        A running trial reads the answer and goes on, or stops.
        """
        length = trial.reported_length
        if length is None:
            return  # nothing reported, nothing to answer
        metric = trial.reported_metric
        value = metric if isinstance(metric, (int, float)) and not isinstance(metric, bool) else math.nan
        operations = self._method.on_validation_completed(_request_of(trial), float(value), length)
        self._apply(operations, answering=trial)

    def on_run_ended(self, trial: TrialRecord, outcome: State, invalid_hp: bool = False) -> None:
        """A trial's processes exited, the run ending in ``outcome``; tells the search what that means.

        A paused trial keeps its operation, to go on when the experiment resumes. A
        failed one exits early (after its restarts, which the caller counts).
        """
        trial = self._store.trial(trial.id)
        if trial.search_state in (SearchState.CLOSED, SearchState.EXITED):
            return
        if trial.search_state == SearchState.RUNNING:
            self._store.set_search_state(trial.id, SearchState.QUEUED)  # its processes are gone
        if outcome == State.PAUSED:
            return
        if invalid_hp or outcome == State.ERROR:
            self._exit_early(trial, ExitedReason.INVALID_HP if invalid_hp else ExitedReason.ERRORED)
            return
        trial = self._store.trial(trial.id)
        if trial.target_length is not None and trial.reported_length != trial.target_length:
            self._report_last_validation(trial, trial.target_length)
            trial = self._store.trial(trial.id)
        if trial.reported_length is not None and trial.answered_length != trial.reported_length:
            self.on_reported(trial)

    def close_idle(self, running: set[int]) -> None:
        """Tells the search that the trials it closed, and that run no processes, are done."""
        for trial in self._store.trials(self._experiment_id):
            if trial.search_state == SearchState.CLOSING and trial.id not in running:
                self._store.set_search_state(trial.id, SearchState.CLOSED)
                self._apply(self._method.on_trial_closed(_request_of(trial)))

    def _report_last_validation(self, trial: TrialRecord, target_length: int) -> None:
        """A trial that ended cleanly without completing its operation: its last validation stands for it.

        A script may train to a length of its own and never call ``op.report_completed``.
        Without a validation of the searcher metric, it counts as exited early.
        """
        metric = self._config.searcher.metric
        validations = [v for v in self._store.metrics(trial.id, MetricKind.VALIDATION) if metric in v.metrics]
        if not validations:
            # Its processes exited cleanly and recorded no error: without one, the summary
            # would say the experiment failed and not why.
            runs = self._store.trial_runs(trial.id)
            if runs and runs[-1].error is None:
                unit = self._config.searcher.max_length.unit.value.lower()
                message = (
                    "the trial's processes exited with status 0 without completing its searcher "
                    f"operation (to {target_length} {unit}): no op.report_completed() on the "
                    f"chief, and no validation of searcher.metric {metric!r}. A script iterates "
                    "core.searcher.operations() and completes each one with "
                    "op.report_completed(searcher_metric) on the chief."
                )
                if self._config.searcher.length_from_script:
                    message = (
                        "the trial's processes exited with status 0 without a validation of searcher.metric "
                        f"{metric!r}: with no searcher.max_length, the script trains to a length of its own "
                        "and its last validation of the searcher metric ranks the trial."
                    )
                RunLifecycle(self._store).record_error(runs[-1].id, RunError(ErrorKind.INCOMPLETE, message))
            self._exit_early(trial, ExitedReason.ERRORED)
            return
        self._store.report_search_metric(trial.id, target_length, validations[-1].metrics[metric])

    def _exit_early(self, trial: TrialRecord, reason: ExitedReason) -> None:
        self._store.set_search_state(trial.id, SearchState.EXITED)
        self._apply(self._method.on_trial_exited_early(_request_of(trial), reason))

    def _apply(self, operations: list[Operation], answering: Optional[TrialRecord] = None) -> None:
        """Records the operations, with the method's new state, in one store transaction."""
        creates: list[NewTrial] = []
        targets: dict[int, tuple[Optional[int], SearchState]] = {}
        for operation in operations:
            if isinstance(operation, Create):
                creates.append(NewTrial(operation.request_id, operation.hparams, operation.trial_seed))
            elif isinstance(operation, ValidateAfter):
                targets[operation.request_id] = (operation.length, SearchState.QUEUED)
            elif isinstance(operation, Close):
                targets[operation.request_id] = (None, SearchState.CLOSING)
            elif isinstance(operation, Shutdown):
                self.shutdown, self.failed, self.shutdown_reason = True, operation.failure, operation.reason
        existing = {trial.request_id: trial for trial in self._store.trials(self._experiment_id)}
        creates = [new for new in creates if new.request_id not in existing]  # a restarted single search
        assignments = []
        for request_id, (length, state) in targets.items():
            trial = existing.get(request_id)
            if trial is not None and trial.search_state == SearchState.RUNNING and state == SearchState.QUEUED:
                state = SearchState.RUNNING  # it trains on in the processes it has
            answered = (
                answering.reported_length if answering is not None and answering.request_id == request_id else None
            )
            assignments.append(Assignment(request_id, length, state, answered))
        if answering is not None and answering.request_id not in targets:
            # No operation for it now (promotion-based ASHA): it stops, and waits without a slot.
            waiting = Assignment(_request_of(answering), None, SearchState.WAITING, answering.reported_length)
            assignments.append(waiting)
        saved = {
            "method": self._method.state_dict(),
            "shutdown": self.shutdown,
            "failed": self.failed,
            "shutdown_reason": self.shutdown_reason,
        }
        self._store.apply_search_step(self._experiment_id, saved, self._storage, creates, assignments)


def _request_of(trial: TrialRecord) -> int:
    """The trial's request id in the search: every trial has one once a SearchRunner was built (see _adopt_orphan)."""
    if trial.request_id is None:
        raise AssertionError(f"trial {trial.id} has no request id in its experiment's search")
    return trial.request_id


def saved_method_state(store: ExperimentStore, experiment_id: int) -> Optional[dict[str, Any]]:
    """The search method's own state as the search last saved it (what its ``state_dict`` returned); None before.

    For pages that show where a search stands (its ASHA rungs, say) without running it.
    """
    saved = store.searcher_state(experiment_id)
    return None if saved is None else saved.get("method")
