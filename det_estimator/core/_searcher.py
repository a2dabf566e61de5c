"""SearcherContext: how long a trial trains before it validates and reports; ``core_context.searcher``."""

import enum
import time
from collections.abc import Iterator
from typing import Any, Callable, Optional, Protocol

from det_estimator.core._distributed import DistributedContext
from det_estimator.core._store import CoreStore
from det_estimator.core._train import plain_number
from det_estimator.errors import PermanentTrialError


class SearcherUsageError(PermanentTrialError, RuntimeError):
    """The script used the searcher's operations in a way that cannot work; a restart would do the same."""


class Unit(enum.Enum):
    """The unit of ``searcher.max_length``, and so of every operation's length."""

    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    """Who iterates :meth:`SearcherContext.operations`: every process in step (default), or the chief alone."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class OperationSource(Protocol):
    """Where the chief's operations come from: the config's ``max_length``, or a hyperparameter search."""

    def next_length(self, completed: Optional[tuple[int, Any]]) -> Optional[int]:
        """The length of the next operation, or None when there is none.

        Args:
            completed: ``(length, searcher_metric)`` of the operation just completed; None
                before the first.
        """


class FixedLengths:
    """Operations of given lengths, one after the other (the ``single`` searcher: one of ``max_length``)."""

    def __init__(self, lengths: list[int]) -> None:
        self._lengths = list(lengths)

    def next_length(self, completed: Optional[tuple[int, Any]]) -> Optional[int]:
        return self._lengths.pop(0) if self._lengths else None


class StoreOperations:
    """The operations a search gives one trial, through the experiment store (the chief's side).

    The experiment's runner sets the trial's target length; when the chief completes an
    operation it records the searcher metric and waits until the runner has answered:
    with a longer target (another operation) or none (the trial stops; a search may give
    it another later, and relaunch it from its checkpoint).

    Args:
        store: the experiment store.
        trial_id: the trial.
        poll_seconds: how often to look for the answer.
    """

    def __init__(self, store: CoreStore, trial_id: int, poll_seconds: float = 0.05) -> None:
        self._store = store
        self._trial_id = trial_id
        self._poll_seconds = poll_seconds

    def next_length(self, completed: Optional[tuple[int, Any]]) -> Optional[int]:
        store = self._store
        if completed is None:
            return store.trial(self._trial_id).target_length
        length, metric = completed
        store.report_search_metric(self._trial_id, length, metric)
        while True:
            trial = store.trial(self._trial_id)
            if trial.answered_length == length:
                target = trial.target_length
                return target if target is not None and target > length else None
            time.sleep(self._poll_seconds)


class SearcherOperation:
    """A request to train until ``length`` in total, validate, and report the searcher metric.

    ``length`` is absolute and in the unit of ``searcher.max_length`` (see
    :meth:`SearcherContext.get_configured_units`): a trial resumed after 300 of 1000
    batches gets the same operation of 1000 and trains the 700 left.
    """

    def __init__(self, length: int, is_chief: bool, on_progress: Callable[[float], None]) -> None:
        self._length = length
        self._is_chief = is_chief
        self._on_progress = on_progress
        self._completed = False
        self._metric: Any = None

    @property
    def length(self) -> int:
        """The total training, in the configured unit, to reach before validating."""
        return self._length

    def report_progress(self, length: float) -> None:
        """Records training progress, in the unit of :attr:`length` (chief only; cheap to call often)."""
        if not self._is_chief:
            raise SearcherUsageError("op.report_progress() is for the chief (rank 0) only.")
        self._on_progress(length)

    def report_completed(self, searcher_metric: Any) -> None:
        """Completes the operation with the value of the searcher metric (chief only, once)."""
        if not self._is_chief:
            raise SearcherUsageError("op.report_completed() is for the chief (rank 0) only.")
        if self._completed:
            raise SearcherUsageError("op.report_completed() may be called only once per operation.")
        self._metric = _searcher_metric_value(searcher_metric)
        self._completed = True


def _searcher_metric_value(value: Any) -> Optional[float]:
    """The searcher metric as a float; a value that is not a number is refused (a search ranks trials by it).

    NumPy and TensorFlow scalars (``loss.numpy()``, a 0-d tensor) are numbers too. NaN,
    and None (no value: a trial that never validated), are ranked last.
    """
    if value is None:
        return None
    number = plain_number(value)
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        return float(number)
    if not isinstance(value, (str, bytes, bool)) and hasattr(value, "__float__"):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass  # an array of several values, say: refused below
    raise SearcherUsageError(
        "op.report_completed() takes the value of the searcher metric, a number (e.g. "
        f"op.report_completed(metrics['loss'])), which the search ranks trials by. Received: {value!r} "
        f"({type(value).__name__})"
    )


class SearcherContext:
    """The searcher's operations for this trial: ``core_context.searcher``.

    The ``single`` searcher gives one operation of ``searcher.max_length``; a
    hyperparameter search may give several (each longer than the last) or stop a trial
    early.

    Example:
        ::

            for op in core_context.searcher.operations():
                while batches < op.length:
                    train_one_batch()
                    batches += 1
                    if core_context.distributed.rank == 0:
                        op.report_progress(batches)
                metrics = validate()
                core_context.train.report_validation_metrics(batches, metrics)
                if core_context.distributed.rank == 0:
                    op.report_completed(metrics["loss"])

    Args:
        distributed: this process's place in the job.
        source: where the chief's operations come from.
        units: the unit of ``searcher.max_length``.
        report_batches: records progress in batches (for the live display).
        to_batches: converts a length in ``units`` to batches; None when it cannot be known
            (records without a ``global_batch_size`` hyperparameter).
        report_target: records the batches an operation trains to (for the live display).
        length_from_script: the config has no ``searcher.max_length``: the script trains to
            a length of its own, and there is no operation to give.
    """

    def __init__(
        self,
        distributed: DistributedContext,
        source: OperationSource,
        units: Optional[Unit],
        report_batches: Callable[[int], None] = lambda batches: None,
        to_batches: Callable[[float], Optional[int]] = round,
        report_target: Callable[[int], None] = lambda batches: None,
        length_from_script: bool = False,
    ) -> None:
        self._distributed = distributed
        self._length_from_script = length_from_script
        self._source = source
        self._units = units
        self._report_batches = report_batches
        self._to_batches = to_batches
        self._report_target = report_target

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """Yields the trial's operations; complete each with ``op.report_completed()`` on the chief.

        With the default mode every process iterates in step (the chief shares each
        operation with the others).
        """
        if self._length_from_script:
            raise SearcherUsageError(
                "The experiment config has no searcher.max_length, so the searcher gives no operation: the script "
                "decides how long it trains. Train to the script's own length (model.fit's epochs, say) and report "
                "validation metrics of searcher.metric (the last one ranks the trial), or set searcher.max_length "
                "(e.g. {batches: 1000}) to train to operations."
            )
        mode = SearcherMode(searcher_mode)
        is_chief = self._distributed.rank == 0
        if not is_chief and mode == SearcherMode.ChiefOnly:
            raise SearcherUsageError("searcher.operations(searcher_mode=ChiefOnly) is for the chief only.")
        share = mode == SearcherMode.WorkersAskChief
        completed: Optional[tuple[int, Any]] = None
        while True:
            length = self._source.next_length(completed) if is_chief else None
            if share:
                length = self._distributed.broadcast(length)
            if length is None:
                return
            target = self._to_batches(length) if is_chief else None
            if target is not None:
                self._report_target(target)
            op = SearcherOperation(length, is_chief, self._report_progress_in_batches)
            yield op
            if is_chief:
                if not op._completed:
                    raise SearcherUsageError(
                        "Call op.report_completed(searcher_metric) on each operation, on the chief."
                    )
                completed = (length, op._metric)

    def _report_progress_in_batches(self, length: float) -> None:
        # A length whose batches are unknown is not shown as batches: the batches that the
        # training metrics report stand, rather than records taken for batches.
        batches = self._to_batches(length)
        if batches is not None:
            self._report_batches(batches)

    def get_configured_units(self) -> Optional[Unit]:
        """The unit of ``searcher.max_length`` (batches, records or epochs)."""
        return self._units

    def acknowledge_out_of_ops(self) -> None:
        """Accepted for compatibility; nothing to do."""
