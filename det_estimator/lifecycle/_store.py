"""RunStore: what the run lifecycle asks of the experiment store, as a protocol."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Protocol, Union

from det_estimator.store import CheckpointRecord, ExperimentRecord, State, StoreLocation, TrialRecord, TrialRunRecord


class RunStore(Protocol):
    """The operations of the experiment store that begin, record and end runs.

    An :class:`~det_estimator.store.ExperimentStore` has them all; so may an in-memory
    fake in unit tests.

    """

    @property
    def location(self) -> StoreLocation:
        """Where the store is (the info of the runs it records names it)."""

    def experiment(self, experiment_id: int) -> ExperimentRecord:
        """One experiment."""

    def trials(self, experiment_id: int) -> list[TrialRecord]:
        """An experiment's trials, oldest first."""

    def trial(self, trial_id: int) -> TrialRecord:
        """One trial."""

    def trial_run(self, run_id: int) -> TrialRunRecord:
        """One run of a trial."""

    def create_experiment(
        self,
        name: str,
        config: dict[str, Any],
        context_dir: str,
        entrypoint: str,
        slots: int,
        test: bool,
        command: Optional[list[str]] = None,
    ) -> int:
        """Records a new experiment; returns its id."""

    def create_trial(
        self, experiment_id: int, hparams: dict[str, Any], seed: int, checkpoint_storage: Union[str, Path]
    ) -> int:
        """Records a new trial; returns its id."""

    def update_experiment(self, experiment_id: int, config: dict[str, Any], slots: int, test: bool) -> None:
        """Replaces an experiment's config, slots and test mode."""

    def own_folders(
        self, experiment_id: Optional[int], make: bool = True, trials: Optional[Sequence[TrialRecord]] = None
    ) -> None:
        """Claims for the store the folders a run of the experiment writes and deletes in (see ExperimentStore).

        ``trials`` are the experiment's, when the caller has read them already; else the store reads them.
        """

    def claim(self, experiment_id: int) -> None:
        """Makes this process the experiment's launcher; raises ``ExperimentBusyError`` if a live one is."""

    def set_state(self, experiment_id: int, state: State) -> None:
        """Sets the experiment's state (a final one reaches its trials still ACTIVE)."""

    def start_run(self, trial_id: int, start_batches: int = 0) -> int:
        """Records that a run of the trial starts after ``start_batches``; returns its id."""

    def set_trial_state(self, trial_id: int, state: State) -> None:
        """Sets one trial's state."""

    def set_progress(self, trial_id: int, batches_trained: int, max_batches: Optional[int] = None) -> None:
        """Records how far the trial is."""

    def record_run_error(self, run_id: int, error: dict[str, Any]) -> None:
        """Records the error that ended a run (the first one recorded wins, but for a consequence)."""

    def end_run(self, run_id: int, state: State, exit_status: Optional[int] = None) -> None:
        """Records how a run ended."""

    def checkpoints(
        self, experiment_id: int, include_deleted: bool = False, trial_id: Optional[int] = None
    ) -> list[CheckpointRecord]:
        """An experiment's (or one trial's) checkpoints still on disk, oldest first."""

    def best_checkpoints(self, experiment_id: int, metric: str, smaller_is_better: bool, count: int) -> set[str]:
        """The uuids of the experiment's ``count`` best checkpoints still on disk."""

    def mark_checkpoints_deleted(self, uuids: list[str]) -> None:
        """Records that these checkpoints' files are deleted."""

    def create_job(self, name: str, config: dict[str, Any], context_dir: str, command: list[str], slots: int) -> int:
        """Records a new job; returns its id."""

    def end_job(
        self, job_id: int, state: State, exit_status: Optional[int] = None, error: Optional[dict[str, Any]] = None
    ) -> None:
        """Records how a job ended."""
