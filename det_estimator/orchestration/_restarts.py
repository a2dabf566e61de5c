"""When a failed trial is restarted: only where a restart can help.

The reference restarts a failed trial up to ``max_restarts`` times whatever failed. Some
failures repeat whatever is tried: a trial that fails before it completes a batch (an
import error, a script that exits at once, a host that cannot be reached) fails the same
way from the same checkpoint, and so does a trial that fails with the same error at the
same place as its previous run did. Restarting those only delays the message by the
restarts' worth of start-ups; they end the trial at once, saying why.
"""

import re
from dataclasses import dataclass
from typing import Optional

from det_estimator.lifecycle import ErrorKind, RunError
from det_estimator.store import CheckpointRecord, TrialRunRecord

# Errors that say the experiment config does not fit the trial (a searcher metric no
# validation reports, a hyperparameter the config lacks).
CONFIG_ERRORS = frozenset({"SearcherMetricError", "UndefinedHyperparameterError"})

# A number in an error message (a batch, a size, an address) may change from run to run,
# or from trial to trial, while the error stays the same one.
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# A traceback's frame line: the place an error was raised is its last one.
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)


@dataclass(frozen=True)
class Failure:
    """A failed run of a trial, as far as the decision to restart it goes.

    Attributes:
        run: the run that failed, with the error it recorded.
        trained: whether it completed a batch after it started (or restarted).
        previous: the trial's run before it, when that one failed too.
    """

    run: TrialRunRecord
    trained: bool
    previous: Optional[TrialRunRecord] = None


def why_not_restart(failure: Failure) -> Optional[str]:
    """Why a restart would fail the same way (the end of a "not restarted: ..." line), or None to restart.

    Not restarted: an error that says the config does not fit the trial or that the
    trial's code asks for what det-estimator cannot do; a run that failed before it
    completed a batch; a run that raised the same error (type, message with its numbers
    aside) at the same place as the run before it.
    """
    error = failure.run.error or {}
    if error.get("type") in CONFIG_ERRORS:
        return "the experiment config is at fault, and a restart would fail the same way"
    if error.get("permanent"):
        return "the trial's code is at fault, and a restart would fail the same way"
    if not failure.trained:
        return (
            "it failed before completing a batch since it started, so a restart would fail the same way "
            "(a restart helps a trial that fails while it trains)"
        )
    previous = failure.previous
    if previous is not None and previous.error and _same_error(error, previous.error):
        return "it failed as its previous run did, with the same error at the same place"
    return None


def _same_error(error: dict, previous: dict) -> bool:
    """Whether two recorded errors are one failure repeated: an exception of one type, message and place."""
    if not error.get("type") or error.get("type") != previous.get("type"):
        return False  # no exception to compare (a killed process, say): a restart may help
    kind = RunError.from_record(error).kind
    # A hang records where every process was stuck, as a traceback's frames.
    if kind not in (ErrorKind.RAISED, ErrorKind.OUTPUT, ErrorKind.HANG):
        return False
    message, earlier = (numbers_aside(str(record.get("message") or "")) for record in (error, previous))
    return message == earlier and _place(error) == _place(previous)


def numbers_aside(text: str) -> str:
    """``text`` with each number replaced by ``#``: errors equal so are one error repeated."""
    return _NUMBER.sub("#", text)


def _place(error: dict) -> Optional[tuple[str, str]]:
    """The file and line the error was raised at: its traceback's last frame (None without a traceback)."""
    frames = list(_FRAME.finditer(str(error.get("traceback") or "")))
    if not frames:
        return None
    return frames[-1].group("file"), frames[-1].group("line")


def resumes_from(latest: Optional[CheckpointRecord]) -> str:
    """Where a restarted trial goes on from, as the restart line says it."""
    if latest is None:
        return "from the start (it has no checkpoint yet)"
    return f"from checkpoint {latest.uuid} after {latest.batches} batches"
