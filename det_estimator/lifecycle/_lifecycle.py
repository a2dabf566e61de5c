"""RunLifecycle: how every run begins, records its error and ends, whichever front door started it."""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from det_estimator._info import TRIAL_TASK, ClusterInfo, TrialClassSpec, TrialInfo
from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.errors import InvalidHP
from det_estimator.lifecycle._errors import RunError, is_clean_exit
from det_estimator.lifecycle._resume import resume_point
from det_estimator.lifecycle._retention import RetentionPolicy, delete_checkpoints_not_kept
from det_estimator.lifecycle._store import RunStore
from det_estimator.store import BATCH_INFERENCE, ExperimentRecord, State


@dataclass(frozen=True)
class Ending:
    """How a run ended, as what ran it saw it.

    Attributes:
        error: what the run raised in this process; None when it returned (or ran in
            launched processes).
        exit_status: the exit status of its launched processes; None when it ran in this
            process.
        stopped: its launcher ended its processes without waiting for them: a pause that
            could not wait for its checkpoint (a job, which cannot pause, fails).
    """

    error: Optional[BaseException] = None
    exit_status: Optional[int] = None
    stopped: bool = False

    @property
    def failed(self) -> bool:
        """Whether the run failed: it raised (not ``InvalidHP``, nor a clean ``sys.exit()``), or exited non-zero."""
        if self.exit_status not in (None, 0):
            return True
        return self.error is not None and not isinstance(self.error, InvalidHP) and not is_clean_exit(self.error)


def run_state(ending: Ending, preempted: bool) -> State:
    """The state a run ends in: ERROR if it failed, PAUSED if it obeyed a pause, else COMPLETED.

    A run its launcher stopped (whatever its processes' exit status) is PAUSED too: the
    trial goes on from its latest checkpoint when the experiment resumes, rather than
    failing.

    Args:
        ending: how it ended.
        preempted: the run acknowledged a pause request (its chief recorded it).
    """
    if ending.stopped:
        return State.PAUSED
    if ending.failed:
        return State.ERROR
    if preempted:
        return State.PAUSED
    return State.COMPLETED


class RunLifecycle:
    """Begins runs, records their errors, and ends them, in one store: the one place that does.

    Every front door goes through it: the launcher of an experiment for each run of a
    trial it launches, a trial run in the caller's own process (``run_trial`` on one
    slot, ``det.init(local=True)``), a script's run by hand (``core.init()``,
    ``det.keras.init()``, a ``DeterminedCallback``'s context), and a job's run.

    Args:
        store: the store the runs are recorded in.
    """

    def __init__(self, store: RunStore) -> None:
        self._store = store

    # Beginning.

    def begin_experiment(self, experiment_id: int) -> State:
        """Claims the experiment for this process and makes it ACTIVE; returns the state it had.

        The process that claims it runs all its runs: the launcher of a search, or the
        process a run that owns its experiment runs in (see :meth:`begin`).

        Raises:
            ExperimentBusyError: another live process runs the experiment.
        """
        store = self._store
        store.claim(experiment_id)
        before = store.experiment(experiment_id).state
        store.set_state(experiment_id, State.ACTIVE)
        return before

    def begin(
        self,
        experiment_id: int,
        trial_id: int,
        *,
        owns_experiment: bool = False,
        pause_file: Optional[str] = None,
        container_addrs: tuple[str, ...] = ("localhost",),
        slots: Optional[int] = None,
        launcher: Optional[tuple[int, str, Optional[int]]] = None,
        search_driven: bool = False,
    ) -> ClusterInfo:
        """Records a new run of a trial, from its latest valid checkpoint; returns the info its processes get.

        Args:
            experiment_id: the trial's experiment.
            trial_id: the trial.
            owns_experiment: the run is all its experiment runs (in this process): this
                process claims the experiment, and the run's end ends it. A run that an
                experiment's launcher starts does not: the launcher claimed it.
            pause_file: the file whose creation asks the run to pause.
            container_addrs: the machines its processes run on.
            slots: its processes (default: the experiment's slots).
            launcher: the process that launched it, ``(pid, host, start time)``.
            search_driven: its operations come from the experiment's search.

        Raises:
            ExperimentBusyError: ``owns_experiment``, and another live process runs the experiment.
        """
        store = self._store
        if owns_experiment:
            self.begin_experiment(experiment_id)
        experiment = store.experiment(experiment_id)
        return self._begin(
            experiment,
            trial_id,
            trial_class=trial_class_of(experiment),
            pause_file=pause_file,
            container_addrs=container_addrs,
            slots=experiment.slots if slots is None else slots,
            launcher=launcher,
            search_driven=search_driven,
        )

    def begin_by_hand(
        self, config: ExperimentConfig, *, command: Optional[list[str]], slots: int, context_dir: Optional[str] = None
    ) -> ClusterInfo:
        """Records a script run by hand as a new experiment of one trial, owned by this process, and begins its run.

        Args:
            config: the config to record it with (validated, its checkpoint storage checked).
            command: the command that runs the script again, for ``experiment resume``.
            slots: the processes it runs on.
            context_dir: where it runs (default: the current directory).
        """
        store = self._store
        seed = config.reproducibility.experiment_seed
        experiment_id = store.create_experiment(
            name=config.name,
            config=config.to_dict(),
            context_dir=context_dir or os.getcwd(),
            entrypoint=config.entrypoint,
            slots=slots,
            test=False,
            command=command,
        )
        store.claim(experiment_id)
        storage = Path(config.checkpoint_storage.checkpoint_directory)
        trial_id = store.create_trial(
            experiment_id,
            config.sample_hyperparameters(seed),
            seed,
            storage if storage.is_absolute() else storage.resolve(),
        )
        # A script, whatever the config's entrypoint says: it is what runs again on a resume.
        return self._begin(store.experiment(experiment_id), trial_id, trial_class=None, slots=slots)

    def _begin(
        self,
        experiment: ExperimentRecord,
        trial_id: int,
        *,
        trial_class: Optional[TrialClassSpec],
        slots: int,
        pause_file: Optional[str] = None,
        container_addrs: tuple[str, ...] = ("localhost",),
        launcher: Optional[tuple[int, str, Optional[int]]] = None,
        search_driven: bool = False,
    ) -> ClusterInfo:
        store = self._store
        trial = store.trial(trial_id)
        # Before a file is written or deleted there: a folder of another store is left alone.
        store.own_folders(experiment.id)
        latest = resume_point(store, trial)
        run_id = store.start_run(trial.id, 0 if latest is None else latest.steps_completed)
        store.set_trial_state(trial.id, State.ACTIVE)
        config = experiment.config
        return ClusterInfo(
            task_type=TRIAL_TASK,
            trial=TrialInfo(trial.id, experiment.id, trial.seed, trial.hparams, config, run_id),
            latest_checkpoint=None if latest is None else latest.uuid,
            user_data=dict(config.get("data") or {}),
            store_path=store.location.passed_on,
            checkpoint_dir=trial.checkpoint_dir,
            test_mode=experiment.test,
            pause_file=pause_file,
            trial_class=trial_class,
            slots=slots,
            container_addrs=container_addrs,
            search_driven=search_driven,
            launcher=launcher,
        )

    def begin_job(
        self, name: str, config: dict[str, Any], context_dir: str, command: list[str], slots: int, data: dict[str, Any]
    ) -> tuple[int, ClusterInfo]:
        """Records a new job (a script run outside any experiment); returns its id and the info its processes get."""
        store = self._store
        store.own_folders(None)
        job_id = store.create_job(name, config, context_dir, command, slots)
        info = ClusterInfo(
            task_type=BATCH_INFERENCE,
            trial=None,
            latest_checkpoint=None,
            user_data=data,
            store_path=store.location.passed_on,
            checkpoint_dir="",
            slots=slots,
        )
        return job_id, info

    # Errors.

    def amend_config(self, experiment_id: int, config: ExperimentConfig) -> None:
        """Records the config a run by hand turned out to have, for its resume (``fit``'s epochs, say).

        A run by hand is recorded when it begins, before the script has said how long it
        trains; ``experiment resume`` runs it again as a trial of the config recorded.
        """
        experiment = self._store.experiment(experiment_id)
        self._store.update_experiment(experiment_id, config.to_dict(), experiment.slots, experiment.test)

    def record_error(self, run_id: int, error: Optional[RunError]) -> None:
        """Records the error that ended a run (the first one recorded wins, but for a consequence); None: nothing."""
        if error is not None:
            self._store.record_run_error(run_id, error.to_record())

    # Ending.

    def end(self, info: ClusterInfo, ending: Ending) -> State:
        """Records how a trial's run ended, and returns the state it ended in (see :func:`run_state`).

        A run that did not complete leaves its trial's progress at its latest checkpoint,
        where a resume continues: batches trained since are lost with the run. A run that
        failed after training all its batches (raising once its training was done) keeps
        them: they were trained, and the trial shows so. A run that owns its experiment
        ends it next, with :meth:`end_experiment`.
        """
        store = self._store
        trial = info.require_trial()
        state = run_state(ending, preempted=store.trial_run(trial.run_id).preempted)
        store.end_run(trial.run_id, state, ending.exit_status)
        store.set_trial_state(trial.trial_id, state)
        record = store.trial(trial.trial_id)
        trained_all = record.max_batches is not None and record.batches_trained >= record.max_batches
        if state != State.COMPLETED and not (state == State.ERROR and trained_all):
            kept = store.checkpoints(trial.experiment_id, trial_id=trial.trial_id)
            store.set_progress(trial.trial_id, max((checkpoint.batches for checkpoint in kept), default=0))
        return state

    def end_experiment(self, experiment_id: int, state: State, config: Optional[ExperimentConfig] = None) -> list[str]:
        """Records the experiment's final state; a completed one first keeps only what its retention says.

        Retention is applied here, once per experiment, over all its trials (see
        :func:`~det_estimator.lifecycle.delete_checkpoints_not_kept`).

        Args:
            experiment_id: the experiment.
            state: how it ended.
            config: its config, when the caller has it parsed (default: read from the store).

        Returns:
            The uuids of the checkpoints retention deleted.
        """
        store = self._store
        deleted: list[str] = []
        try:
            if state == State.COMPLETED:
                if config is None:
                    config = load_experiment_config(store.experiment(experiment_id).config)
                deleted = delete_checkpoints_not_kept(store, experiment_id, RetentionPolicy.of(config))
        finally:
            store.set_state(experiment_id, state)
        return deleted

    def end_job(self, job_id: int, ending: Ending, error: Optional[RunError] = None) -> State:
        """Records how a job ended: COMPLETED when its processes exited 0 by themselves, else ERROR; returns it."""
        state = State.ERROR if ending.failed or ending.stopped else State.COMPLETED
        self._store.end_job(
            job_id, state, ending.exit_status, None if error is None or state != State.ERROR else error.to_record()
        )
        return state


def trial_class_of(experiment: ExperimentRecord) -> Optional[TrialClassSpec]:
    """How a worker imports the experiment's trial class; None for a script experiment."""
    if experiment.command is not None:
        return None
    if experiment.trial_class is not None:
        spec = experiment.trial_class
        return TrialClassSpec(spec["module"], spec["qualname"], spec.get("file"), tuple(spec.get("sys_path", ())))
    module, qualname = experiment.entrypoint.split(":")
    return TrialClassSpec(module, qualname, None, (experiment.context_dir,))
