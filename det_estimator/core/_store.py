"""CoreStore: what the Core API asks of the experiment store, as a protocol.

The contexts of ``core`` never open a store: whoever builds them (the worker, a front
end that trains in its own process, ``core.init()``) opens one client and hands it
down through :func:`~det_estimator.core.build_context`. In a run that client is an
:class:`~det_estimator.store.ExperimentStore`; in unit tests it may be an in-memory fake.
A thread that needs a connection of its own (an SQLite connection serves the thread
that opened it; the pause watcher polls from its own thread) asks the client for one
with :meth:`CoreStore.for_thread`.
"""

from pathlib import Path
from typing import Any, Optional, Protocol, Union

from det_estimator.store import (
    BestValidation,
    CheckpointRecord,
    ExperimentRecord,
    MetricKind,
    State,
    TrialRecord,
    TrialRunRecord,
)


class CoreStore(Protocol):
    """The operations of the experiment store the Core API uses, and nothing more.

    Attributes:
        path: where the store is (it goes into the info of the runs it records).
    """

    path: Path

    def for_thread(self) -> "CoreStore":
        """A client of the same store for another thread, with its own connection."""

    def close(self) -> None:
        """Closes the client."""

    # What the contexts read.

    def experiment(self, experiment_id: int) -> ExperimentRecord:
        """One experiment (its pause request, above all)."""

    def trial(self, trial_id: int) -> TrialRecord:
        """One trial."""

    def trial_run(self, run_id: int) -> TrialRunRecord:
        """One run of a trial."""

    def checkpoint(self, uuid: str) -> CheckpointRecord:
        """One checkpoint of any trial; raises ``UnknownIdError`` when there is none."""

    def best_checkpoints(self, experiment_id: int, metric: str, smaller_is_better: bool, count: int) -> set[str]:
        """The uuids of the experiment's ``count`` best checkpoints still on disk."""

    def best_validation(self, experiment_id: int, trial_id: Optional[int] = None) -> Optional[BestValidation]:
        """The best value of the experiment's searcher metric so far."""

    # Metrics, progress and checkpoints.

    def record_metrics(
        self, trial_id: int, kind: MetricKind, batches: int, metrics: dict[str, Any], run_id: Optional[int] = None
    ) -> None:
        """Records training or validation metrics."""

    def set_progress(self, trial_id: int, batches_trained: int, max_batches: Optional[int] = None) -> None:
        """Records how far the trial is."""

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
        """Records a sealed checkpoint."""

    def record_checkpoint_validation(
        self, uuid: str, metrics: dict[str, Any], size_bytes: Optional[int] = None
    ) -> None:
        """Adds validation metrics to a recorded checkpoint."""

    def mark_checkpoints_deleted(self, uuids: list[str]) -> None:
        """Records that these checkpoints' files are deleted."""

    # Pauses and the search.

    def acknowledge_preemption(self, run_id: int) -> None:
        """Records that the run stops because it was asked to pause."""

    def report_search_metric(self, trial_id: int, length: int, metric: Any) -> None:
        """Records that the trial completed its operation of ``length`` with this searcher metric."""

    # The run: its error, and a run by hand's beginning and end.

    def record_run_error(self, run_id: int, error: dict[str, Any]) -> None:
        """Records the error that ended a run (the first one recorded wins)."""

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

    def claim(self, experiment_id: int) -> None:
        """Makes this process the experiment's launcher."""

    def create_trial(
        self, experiment_id: int, hparams: dict[str, Any], seed: int, checkpoint_storage: Union[str, Path]
    ) -> int:
        """Records a new trial; returns its id."""

    def start_run(self, trial_id: int, start_batches: int = 0) -> int:
        """Records that a run of the trial starts; returns its id."""

    def end_run(self, run_id: int, state: State, exit_status: Optional[int] = None) -> None:
        """Records how a run ended."""

    def set_state(self, experiment_id: int, state: State) -> None:
        """Sets the experiment's state."""
