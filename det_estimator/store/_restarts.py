"""The record of one automatic restart of a failed trial."""

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartRecord:
    """One automatic restart of a trial after a run failed.

    Attributes:
        trial_id: the trial.
        failed_run_id: the run that failed.
        number: 1 for the trial's first restart, 2 for its second...
        cause: the failing rank's error line (``rank 1: RuntimeError: ...``).
        restarted_at: when the restart was decided (seconds since the epoch).
    """

    trial_id: int
    failed_run_id: int
    number: int
    cause: str
    restarted_at: float
