"""CoreStore: what the Core API asks of the experiment store, as a protocol.

The contexts of ``core`` never open a store: whoever builds them (the worker, a front
end that trains in its own process, ``core.init()``) opens one client and hands it
down through :func:`~det_estimator.core.build_context`. In a run that client is an
:class:`~det_estimator.store.ExperimentStore`; in unit tests it may be an in-memory fake.
A thread that needs a connection of its own (an SQLite connection serves the thread
that opened it; the pause watcher polls from its own thread) asks the client for one
with :meth:`CoreStore.for_thread`.
"""

from typing import Any, Optional, Protocol

from det_estimator.lifecycle import RunStore
from det_estimator.store import BestValidation, CheckpointRecord, MetricKind


class CoreStore(RunStore, Protocol):
    """The operations of the experiment store the Core API uses, and nothing more.

    Those of :class:`~det_estimator.lifecycle.RunStore`, through which a run by hand
    begins, records its error and ends, and these, through which the contexts report.
    """

    def for_thread(self) -> "CoreStore":
        """A client of the same store for another thread, with its own connection."""

    def close(self) -> None:
        """Closes the client."""

    def checkpoint(self, uuid: str) -> CheckpointRecord:
        """One checkpoint of any trial; raises ``UnknownIdError`` when there is none."""

    def best_validation(self, experiment_id: int, trial_id: Optional[int] = None) -> Optional[BestValidation]:
        """The best value of the experiment's searcher metric so far."""

    def record_metrics(
        self, trial_id: int, kind: MetricKind, batches: int, metrics: dict[str, Any], run_id: Optional[int] = None
    ) -> None:
        """Records training or validation metrics."""

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

    def acknowledge_preemption(self, run_id: int) -> None:
        """Records that the run stops because it was asked to pause."""

    def report_search_metric(self, trial_id: int, length: int, metric: Any) -> None:
        """Records that the trial completed its operation of ``length`` with this searcher metric."""
