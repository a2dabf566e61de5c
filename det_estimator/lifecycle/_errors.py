"""RunError: what a run records of the error that ended it, with the kind of error it is."""

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from det_estimator import _root_cause
from det_estimator.errors import InvalidHP


class ErrorKind(enum.Enum):
    """What ended a run, as far as det-estimator can tell."""

    RAISED = "raised"
    """A process raised: its root cause, with the user's own frames."""
    INVALID_HP = "invalid_hp"
    """The trial raised ``InvalidHP``: no failure; a search replaces the trial."""
    OUTPUT = "output"
    """No process recorded why it failed: the first traceback of the processes' output."""
    EXITED = "exited"
    """No process recorded why it failed and none printed a traceback: an exit status, a signal."""
    UNREACHABLE = "unreachable"
    """horovodrun could not reach a host over ssh."""
    INCOMPLETE = "incomplete"
    """The processes exited cleanly without completing their searcher operation."""
    INTERRUPTED = "interrupted"
    """Ctrl-C or SIGTERM ended the processes of a job (a job cannot pause)."""
    HANG = "hang"
    """No process of the run made progress for the config's ``hang_timeout_seconds``: the launcher ended it."""


@dataclass(frozen=True)
class RunError:
    """The error that ended a run, as the store records it (see :meth:`to_record`).

    Attributes:
        kind: what ended the run.
        message: the exception's message, or what the output or the exit status says.
        rank: the rank it happened on, when known.
        type: the exception's class name, when there is one.
        traceback: the exception with the user's own frames, or the traceback of the output.
        origin: what raised it, when known (a metric, a hook).
        consequence: the process failed because another one did: the other's error is the cause.
        permanent: a restart would fail the same way (the trial's code or config is at fault).
    """

    kind: ErrorKind
    message: str
    rank: Optional[int] = None
    type: Optional[str] = None
    traceback: str = ""
    origin: str = ""
    consequence: bool = False
    permanent: bool = False

    @classmethod
    def of(cls, error: BaseException, rank: Optional[int]) -> Optional["RunError"]:
        """The record of ``error``, raised by this process on ``rank``: its root cause.

        None for ``SystemExit`` and ``KeyboardInterrupt``: they say how the process was
        told to end, not what went wrong. ``sys.exit(0)`` is a clean end; any other exit
        status (and, for launched processes, what they printed last) says why it failed.
        """
        if isinstance(error, (SystemExit, KeyboardInterrupt)):
            return None
        cause = _root_cause.root_cause(error, rank)
        return cls(
            kind=ErrorKind.INVALID_HP if isinstance(error, InvalidHP) else ErrorKind.RAISED,
            message=cause.message,
            rank=cause.rank,
            type=cause.type,
            traceback=cause.traceback,
            origin=cause.origin,
            consequence=cause.consequence,
            permanent=cause.permanent,
        )

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "RunError":
        """The inverse of :meth:`to_record`; a record written before kinds existed gets the likeliest one."""
        kind = record.get("kind")
        if kind is None:
            kind = ErrorKind.INVALID_HP if record.get("type") == "InvalidHP" else _kind_of_type(record.get("type"))
        return cls(
            kind=ErrorKind(kind),
            message=str(record.get("message") or ""),
            rank=record.get("rank"),
            type=record.get("type"),
            traceback=str(record.get("traceback") or ""),
            origin=str(record.get("origin") or ""),
            consequence=bool(record.get("consequence")),
            permanent=bool(record.get("permanent")),
        )

    def to_record(self) -> dict[str, Any]:
        """The record as JSON-ready data, with the keys the store's readers use (``type``, ``message``, ...)."""
        return {
            "kind": self.kind.value,
            "rank": self.rank,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "origin": self.origin,
            "consequence": self.consequence,
            "permanent": self.permanent,
        }


def _kind_of_type(type_name: Optional[str]) -> ErrorKind:
    return ErrorKind.RAISED if type_name else ErrorKind.EXITED


def is_clean_exit(error: BaseException) -> bool:
    """Whether ``error`` is how a script ends without an error: ``sys.exit(0)`` or ``sys.exit()``."""
    return isinstance(error, SystemExit) and error.code in (None, 0)


# A job's process records its error as a file in the run's own folder, which its launcher reads.
_PROCESS_ERROR = "error-rank{rank}.json"


def write_process_error(directory: Path, error: RunError) -> None:
    """Records the error that ends this process of a job, for its launcher (:func:`cause_among_processes`).

    A job has no run in the store: its launcher records the job's error when its
    processes have ended.
    """
    rank = -1 if error.rank is None else error.rank
    path = directory / _PROCESS_ERROR.format(rank=rank)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(error.to_record()), encoding="utf-8")
    partial.replace(path)


def cause_among_processes(directory: Path) -> Optional[RunError]:
    """The error that ended a job, of those its processes recorded: the lowest rank's that is no consequence.

    None when no process recorded one (it failed before det-estimator's context was
    made, or was killed).
    """
    found = []
    for path in sorted(directory.glob(_PROCESS_ERROR.format(rank="*"))):
        try:
            found.append(RunError.from_record(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    found.sort(key=lambda error: (error.consequence, -1 if error.rank is None else error.rank))
    return found[0] if found else None
