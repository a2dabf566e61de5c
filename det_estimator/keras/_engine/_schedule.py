"""When the engine acts: after which batches and epochs it reports, checkpoints and asks whether to pause.

:class:`EpochSchedule` is a script's (``DeterminedCallback``, ``context.fit``): periods in
batches and epochs of the script's own ``fit``.
"""

from dataclasses import dataclass
from typing import Any, Optional, Union


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
            report_every_batches = None if train_metrics_report_period == "epoch" else train_metrics_report_period
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
    return bool(period) and steps // period > before // period


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
