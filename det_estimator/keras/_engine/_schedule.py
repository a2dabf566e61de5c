"""When the engine acts: after which batches and epochs it reports, validates, checkpoints and asks whether to pause.

- :class:`EpochSchedule` is a script's (``DeterminedCallback``, ``context.fit``): periods
  in batches and epochs of the script's own ``fit``.
- :class:`WorkloadSchedule` is a trial's: workloads of ``scheduling_unit`` batches, cut
  where a validation, a checkpoint or the searcher operation's end falls due, and what
  follows each workload (training metrics, validation, checkpoint, pause, the next
  operation), by the experiment config's rules.
"""

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Union


@dataclass(frozen=True)
class EpochSchedule:
    """A script's periods: reports and checkpoints every so many batches or epochs, pause checks every so many batches.

    Attributes:
        report_every_batches: report training metrics every this many batches (None:
            at epochs' ends only).
        checkpoint_every_epochs: checkpoint at the end of every this many epochs (None: never there).
        checkpoint_every_batches: checkpoint every this many batches too (None: never).
        check_preempt_every_batches: ask whether to pause every this many batches.
    """

    report_every_batches: Optional[int] = 100
    checkpoint_every_epochs: Optional[int] = 1
    checkpoint_every_batches: Optional[int] = None
    check_preempt_every_batches: int = 10

    @classmethod
    def from_arguments(
        cls,
        report_every_batches: Optional[int],
        checkpoint_every_epochs: Optional[int],
        checkpoint_every_batches: Optional[int],
        check_preempt_every_batches: int,
        train_metrics_report_period: Union[int, str, None] = None,
        checkpoint_epochs: Optional[int] = None,
    ) -> "EpochSchedule":
        """The schedule of ``DeterminedCallback``'s arguments, the reference system's names included.

        Raises:
            ValueError: a period is not a positive int.
        """
        if train_metrics_report_period is not None:
            if train_metrics_report_period != "epoch" and not _is_positive_int(train_metrics_report_period):
                raise ValueError(
                    "Argument `train_metrics_report_period` must be 'epoch' or a positive int. "
                    f"Received: train_metrics_report_period={train_metrics_report_period!r}"
                )
            # "epoch", or a positive int (checked above).
            report_every_batches = train_metrics_report_period if isinstance(train_metrics_report_period, int) else None
        if checkpoint_epochs is not None:
            checkpoint_every_epochs = checkpoint_epochs or None
        for name, value in (
            ("report_every_batches", report_every_batches),
            ("checkpoint_every_epochs", checkpoint_every_epochs),
            ("checkpoint_every_batches", checkpoint_every_batches),
        ):
            if value is not None and not _is_positive_int(value):
                raise ValueError(f"Argument `{name}` must be a positive int or None. Received: {name}={value!r}")
        if not _is_positive_int(check_preempt_every_batches):
            raise ValueError(
                "Argument `check_preempt_every_batches` must be a positive int. "
                f"Received: check_preempt_every_batches={check_preempt_every_batches!r}"
            )
        return cls(report_every_batches, checkpoint_every_epochs, checkpoint_every_batches, check_preempt_every_batches)

    def report_due(self, before: int, steps: int) -> bool:
        """Whether training metrics are due after going from ``before`` to ``steps`` batches."""
        return _crossed(self.report_every_batches, before, steps)

    def checkpoint_due(self, before: int, steps: int) -> bool:
        """Whether a checkpoint is due after going from ``before`` to ``steps`` batches."""
        return _crossed(self.checkpoint_every_batches, before, steps)

    def preempt_check_due(self, before: int, steps: int) -> bool:
        """Whether to ask whether to pause after going from ``before`` to ``steps`` batches."""
        return _crossed(self.check_preempt_every_batches, before, steps)

    def checkpoint_after_epoch(self, epoch: int) -> bool:
        """Whether a checkpoint is due at the end of epoch ``epoch`` (counted from 0)."""
        return self.checkpoint_every_epochs is not None and (epoch + 1) % self.checkpoint_every_epochs == 0


def _crossed(period: Optional[int], before: int, steps: int) -> bool:
    # Crossed rather than equal: with steps_per_execution > 1 Keras calls back every few batches.
    return period is not None and steps // period > before // period


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class TrialSteps(Protocol):
    """What a trial's schedule asks of the trial's controller: its bookkeeping, and the work after a workload.

    The bookkeeping (searcher operations, periods, the best metric) is
    ``det_estimator._trial_controller.TrialController``'s.
    """

    @property
    def batches(self) -> int:
        """Batches trained in all."""

    @property
    def last_validation(self) -> int:
        """The batches at the last validation (-1: none yet)."""

    @property
    def last_checkpoint(self) -> int:
        """The batches at the last checkpoint (-1: none yet)."""

    def workload_length(self, max_batches: int) -> int:
        """The batches of the workload that begins now, with ``max_batches`` to train in all for the operation."""

    def begin_training(self) -> None:
        """Training (re)starts: the trial's callbacks begin, the initial validation if due."""

    def count_batches(self, batches: int) -> None:
        """A step trained ``batches`` batches."""

    def end_training(self) -> None:
        """Training ended (completed, paused or stopped)."""

    def begin_workload(self, requested: int) -> None:
        """A workload of ``requested`` batches begins (the trial's hooks, the training metrics reset)."""

    def batches_to_epoch_end(self) -> Optional[int]:
        """Batches left in the trial's epoch (``records_per_epoch``), or None."""

    def end_workload(self) -> None:
        """A workload ended: its training metrics are reported, the trial's hooks called."""

    def validation_due(self, stopping: str) -> bool:
        """Whether the config's periods (or ``stopping``) call for a validation now."""

    def validate(self) -> dict[str, Any]:
        """Validates now; returns the metrics."""

    def stop_requested(self) -> bool:
        """Whether a callback asked to stop in the validation, on any process."""

    def checkpoint_due(self, metrics: Optional[dict[str, Any]]) -> bool:
        """Whether the config's period or checkpoint policy calls for a checkpoint now."""

    def checkpoint(self, metrics: Optional[dict[str, Any]]) -> None:
        """Writes a checkpoint now (every process)."""

    def pause_asked_meanwhile(self, stopping: str, validated: bool, checkpointed: bool) -> bool:
        """Whether a pause was asked for during this workload's validation or checkpoint."""

    def next_operation(self) -> Optional[int]:
        """Completes the searcher operation; returns the batches to train in all for the next, or None."""

    def pause(self) -> None:
        """Records the pause."""

    def exit_early(self) -> None:
        """Records that a callback stopped training."""


class WorkloadSchedule:
    """A trial's workloads, and what follows each, as the trial's steps go by.

    Before each step :meth:`batches_for_step` says how many batches it trains (a new
    workload begins when the last ended); after it :meth:`after_step` counts them, and
    at a workload's end does what follows it. A resumed trial thus validates and
    checkpoints at the batches an uninterrupted one would.

    Args:
        trial: the trial's controller, whose ``workload_length`` is the rule shared by both
            trial controllers (``det_estimator._trial_controller.TrialController``).
    """

    def __init__(self, trial: TrialSteps) -> None:
        self._trial = trial
        self._max_batches = 0  # the batches to train in all for the searcher's operation
        self._requested = 0  # batches of the workload under way (0: none)
        self._done = 0

    def start(self, max_batches: int) -> None:
        """Training starts, to ``max_batches`` batches in all for the searcher's operation."""
        self._max_batches = max_batches
        self._requested = self._done = 0

    def workload_length(self) -> int:
        """``scheduling_unit`` batches, or fewer: to end where the operation ends, a validation or checkpoint is due."""
        return self._trial.workload_length(self._max_batches)

    def batches_for_step(self, batches_per_call: int) -> int:
        """The batches the next step trains: at most ``batches_per_call``, to the workload's or the epoch's end.

        Begins a workload when none is under way.
        """
        if not self._requested:
            self._requested, self._done = self.workload_length(), 0
            self._trial.begin_workload(self._requested)
        batches = min(batches_per_call, self._requested - self._done)
        to_epoch_end = self._trial.batches_to_epoch_end()
        return batches if to_epoch_end is None else min(batches, to_epoch_end)

    def after_step(self, batches: int, pause: bool, stop: bool) -> bool:
        """Counts a step's ``batches``; at a workload's end does what follows it. Returns whether training goes on.

        Args:
            batches: the batches the step trained (the trial's count already holds them).
            pause: every process agreed to pause.
            stop: a callback asked to stop, on some process.
        """
        self._done += batches
        stopping = "pause" if pause else "request_stop" if stop else ""
        if not stopping and self._done < self._requested:
            return True
        self._requested = 0
        if self._trial.batches >= self._max_batches:
            stopping = "end"
        return self._after_workload(stopping)

    def _after_workload(self, stopping: str) -> bool:
        trial = self._trial
        trial.end_workload()
        validate = trial.validation_due(stopping)
        metrics = trial.validate() if validate else None
        if validate and not stopping and trial.stop_requested():
            stopping = "request_stop"
        checkpoint_now = bool(stopping) or trial.checkpoint_due(metrics)
        if checkpoint_now:
            trial.checkpoint(metrics)
        if trial.pause_asked_meanwhile(stopping, validate, checkpoint_now):
            stopping = "pause"  # at this batch
            if not checkpoint_now:
                trial.checkpoint(metrics)
        if stopping == "end":
            next_batches = trial.next_operation()
            if next_batches is None:
                return False
            self._max_batches = next_batches
            return True
        if stopping == "pause":
            trial.pause()
            return False
        if stopping == "request_stop":
            trial.exit_early()
            return False
        return True
