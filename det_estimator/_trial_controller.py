"""What the Estimator and Keras trial controllers both keep track of, besides training itself.

Each controller trains in its own way (a long-lived ``estimator.train()`` session driven
by a hook, or the Keras model's train function called in a loop); around the training
they follow the same rules, kept here:

* the searcher's operations: train to each one's length, then report its metric; an
  operation whose length a resumed trial has already trained is completed at once;
* the experiment config's periods: validate every ``min_validation_period``, checkpoint
  every ``min_checkpoint_period`` and as ``checkpoint_policy`` asks;
* the best searcher metric, which decides ``checkpoint_policy: best``.
"""

from collections.abc import Iterator
from typing import Any, Optional

from det_estimator import core
from det_estimator.config import ExperimentConfig, Length
from det_estimator.store import State


def new_trial_context(context_class: type, core_context: core.Context) -> Any:
    """A new trial context of ``context_class`` for the trial of ``core_context`` (both trial contexts take these)."""
    trial = core_context.info.require_trial()
    return context_class(
        core_context.config,
        trial.hparams,
        trial.trial_seed,
        core_context.distributed,
        trial_id=trial.trial_id,
        experiment_id=trial.experiment_id,
    )


class TrialController:
    """The bookkeeping of one trial's run on this process, shared by the trial controllers.

    Every rank of the job runs one controller and takes the same decisions from the
    same inputs, so that all ranks validate, checkpoint and stop at the same batch.

    Subclasses set ``self.context``, the trial's context (:func:`new_trial_context`),
    whose ``get_global_batch_size()`` turns lengths into batches.

    Args:
        core_context: the trial's core context on this process.
    """

    context: Any

    def __init__(self, core_context: core.Context) -> None:
        info = core_context.info
        self._core = core_context
        self._distributed = core_context.distributed
        self._trial = info.require_trial()
        self._config: ExperimentConfig = core_context.config
        self._hparams = self._trial.hparams
        self._seed = self._trial.trial_seed
        self._test = info.test_mode
        self._latest_checkpoint = info.latest_checkpoint
        self._state = State.COMPLETED
        self._batches = 0
        self._best_metric: Optional[float] = None
        self._last_validation = -1
        self._last_checkpoint = -1
        self._last_metrics: Optional[dict[str, Any]] = None
        self._improved = False
        # The searcher's operations, from _start_operations on.
        self._operations: Iterator[core.SearcherOperation] = iter(())
        self._operation: Optional[core.SearcherOperation] = None

    @property
    def _is_chief(self) -> bool:
        return self._distributed.rank == 0

    # The searcher's operations.

    def _target(self, operation: core.SearcherOperation) -> int:
        """The batches to train in all before ``operation`` is done (one more than now, in test mode)."""
        if self._test:
            return self._batches + 1
        length = Length(self._config.searcher.max_length.unit, operation.length)
        return length.to_batches(self.context.get_global_batch_size(), self._config.records_per_epoch)

    def _start_operations(self) -> Optional[int]:
        """Takes the searcher's first operation not yet trained; returns the batches to train in all, or None."""
        self._operations = iter(self._core.searcher.operations())
        self._operation = next(self._operations, None)
        if self._operation is not None:
            self._core.train.report_start(self._batches, self._target(self._operation))
        self._complete_operations_reached()
        return None if self._operation is None else self._target(self._operation)

    def _next_operation(self) -> Optional[int]:
        """Completes the operation just trained; returns the batches to train in all for the next, or None."""
        trained = self._operation
        if self._is_chief and trained is not None:
            trained.report_completed(self._searcher_metric())
        self._operation = next(self._operations, None)
        self._complete_operations_reached()
        if self._operation is None:
            return None
        max_batches = self._target(self._operation)
        self._core.train.report_start(self._batches, max_batches)
        return max_batches

    def _complete_operations_reached(self) -> None:
        """Completes, with the best metric, the searcher's operations whose length is already trained.

        A trial resumed at the length of its operation (killed after that checkpoint, before
        reporting it) completes it at once; a search may then answer with a longer one,
        which is trained, not completed with the old metric.
        """
        while self._operation is not None and self._batches >= self._target(self._operation):
            if self._is_chief:
                self._operation.report_completed(self._best_metric)
            self._operation = next(self._operations, None)

    def _searcher_metric(self) -> Optional[float]:
        value = (self._last_metrics or {}).get(self._config.searcher.metric)
        return value if isinstance(value, (int, float)) else None

    # Workloads, validations and checkpoints.

    @property
    def batches(self) -> int:
        """Batches trained in all."""
        return self._batches

    @property
    def last_validation(self) -> int:
        """The batches at the last validation (-1: none yet)."""
        return self._last_validation

    @property
    def last_checkpoint(self) -> int:
        """The batches at the last checkpoint (-1: none yet)."""
        return self._last_checkpoint

    def workload_length(self, max_batches: int) -> int:
        """The batches of the workload that begins now: ``scheduling_unit``, or fewer (1 in test mode).

        A workload ends where the operation ends (``max_batches`` in all) or where
        ``min_validation_period`` or ``min_checkpoint_period`` falls due, as the reference
        cuts training: periods shorter than ``scheduling_unit`` are then kept, and as the
        periods count from the last validation and checkpoint (restored with a
        checkpoint), a resumed trial validates at the batches an uninterrupted one would.
        """
        if self._test:
            return 1
        length = min(self._config.scheduling_unit, max_batches - self._batches)
        for period, since in (
            (self._config.min_validation_period, self._last_validation),
            (self._config.min_checkpoint_period, self._last_checkpoint),
        ):
            if period is not None:
                length = min(length, max(since, 0) + self._period_batches(period) - self._batches)
        return max(1, length)

    def _period_batches(self, period: Length) -> int:
        return period.to_batches(self.context.get_global_batch_size(), self._config.records_per_epoch)

    def _period_elapsed(self, period: Optional[Length], since: int) -> bool:
        if period is None:
            return False
        return self._batches - max(since, 0) >= self._period_batches(period)

    def _validation_due(self, stopping: str) -> bool:
        """Whether to validate after a workload: at an operation's end, before a requested stop, or by period."""
        return stopping in ("end", "request_stop") or self._period_elapsed(
            self._config.min_validation_period, self._last_validation
        )

    def _checkpoint_due(self, metrics: Optional[dict[str, Any]]) -> bool:
        if self._period_elapsed(self._config.min_checkpoint_period, self._last_checkpoint):
            return True
        policy = self._config.checkpoint_policy
        return metrics is not None and (policy == "all" or (policy == "best" and self._improved))

    def _pause_asked_meanwhile(self, stopping: str, validated: bool, checkpointed: bool) -> bool:
        """Whether a pause was asked for during this workload's validation or checkpoint, which no step saw."""
        return not stopping and (validated or checkpointed) and self._core.preempt.should_preempt(auto_ack=False)

    def _pause(self) -> None:
        self._state = State.PAUSED
        self._core.preempt.acknowledge_preemption_signal()

    def _record_validation(self, metrics: dict[str, Any]) -> None:
        """Records a validation at this batch: the searcher metric's best so far, and the store's record."""
        self._last_validation = self._batches
        self._improved = self._is_improvement(metrics)
        self._last_metrics = metrics
        self._core.train.report_validation_metrics(self._batches, metrics)

    def _is_improvement(self, metrics: dict[str, Any]) -> bool:
        searcher = self._config.searcher
        value = metrics.get(searcher.metric)
        if not isinstance(value, (int, float)):
            return False  # report_validation_metrics refuses it, saying why
        improved = searcher.improves_on(value, self._best_metric)
        if improved:
            self._best_metric = value
        return improved
