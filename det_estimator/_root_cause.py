"""The root cause of a failed process: the user's exception with the user's own frames, and where it came from.

A failure inside training reaches the top of a process wrapped by every layer it
crossed. A reducer's exception becomes text inside TensorFlow's ``py_func`` error,
raised while TensorFlow handles the ``OutOfRangeError`` that ends every evaluation's
input; a hook's exception carries dozens of frames of TensorFlow's sessions and of
det-estimator's controller. A person needs the first exception their own code raised,
their own frames, and which metric, hook or callback it came from. This module picks
that out, so that the command can show it instead of the whole chain (which stays in
the trial's log).

Where the original exception object is lost on the way up (a reducer's error crosses a
``py_func`` boundary, and reaches other ranks as data), the code that caught it notes
the cause here with :func:`note`, and :func:`root_cause` prefers it.

Imports nothing of det-estimator, so every layer may use it.
"""

import dataclasses
import os
import sys
import sysconfig
import traceback
import types
from dataclasses import dataclass
from typing import Any, Optional

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(
    os.path.abspath(path) + os.sep
    for path in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
)
# Exceptions that are the normal end of something, never a cause: TensorFlow raises
# OutOfRangeError at the end of every input, and an error raised while handling it
# carries it as its context.
_NOISE = ("OutOfRangeError", "StopIteration", "GeneratorExit")
# Errors a process gets because another one died: a collective whose peer is gone.
_CONSEQUENCE_TYPES = ("PeerGoneError", "HorovodInternalError")
_CONSEQUENCE_TEXT = (
    "Horovod has been shut down",
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
)


@dataclass(frozen=True)
class RootCause:
    """Why a process failed, as a person should read it.

    Attributes:
        rank: the rank whose code raised it (None when unknown).
        type: the exception's class name.
        message: the exception's message.
        traceback: the exception with the user's own frames (all frames when none are
            the user's); chained exceptions that are only the normal end of an input
            are left out.
        origin: what raised it, when known: ``"metric 'auc' (FlakyAuc.accumulate)"``,
            ``"MyHook.after_run"``.
        consequence: the process failed because another one did (a collective lost a
            peer): another rank's error, if any, is the cause.
        permanent: the trial's code or config asks for what cannot work (the error's
            class says so with ``permanent = True``, as ``errors.PermanentTrialError``
            does): a restart would fail the same way.
    """

    rank: Optional[int]
    type: str
    message: str
    traceback: str
    origin: str = ""
    consequence: bool = False
    permanent: bool = False

    def to_record(self) -> dict[str, Any]:
        """The cause as JSON-ready data (the store's run error)."""
        return dataclasses.asdict(self)

    def headline(self) -> str:
        """One line: where it happened and what it was."""
        where = f" on rank {self.rank}" if self.rank is not None else ""
        origin = f" in {self.origin}" if self.origin else ""
        return f"failed{where}{origin}: {self.type}: {self.message.splitlines()[0] if self.message else ''}".rstrip()


_noted: Optional[RootCause] = None


def note(cause: RootCause) -> None:
    """Remembers the cause of a failure in progress (the first one noted wins: later ones are its consequences)."""
    global _noted
    if _noted is None:
        _noted = cause


def forget() -> None:
    """Forgets a noted cause (the failure was handled)."""
    global _noted
    _noted = None


def root_cause(error: BaseException, rank: Optional[int], origin: str = "", use_noted: bool = True) -> RootCause:
    """The cause a person should see of ``error``, raised in this process on ``rank``.

    Args:
        error: the exception that ends the process.
        rank: this process's rank.
        origin: what raised it, when the caller knows (else read off the user's first frame).
        use_noted: a cause noted by :func:`note` during this failure wins over ``error`` itself.
    """
    if use_noted and _noted is not None and not isinstance(error, (KeyboardInterrupt, SystemExit)):
        return _noted
    if _is_own_error(error):
        # det-estimator's own errors say what was wrong and what to do: the message is the
        # cause, and det-estimator's frames would only hide it.
        return RootCause(
            rank,
            type(error).__name__,
            str(error),
            f"{type(error).__name__}: {error}",
            origin,
            permanent=_is_permanent(error),
        )
    links = [link for link in _chain(error) if type(link).__name__ not in _NOISE] or [error]
    entry = _entry_into_user_code(links[-1].__traceback__)
    if not origin and entry is not None and entry.f_code.co_name != "<module>":
        origin = _frame_origin(entry)
    return RootCause(
        rank=rank,
        type=type(error).__name__,
        message=str(error),
        traceback="\nDuring handling of the above exception, another exception occurred:\n\n".join(
            format_user_traceback(link) for link in links
        ),
        origin=origin,
        consequence=_is_consequence(error),
        permanent=_is_permanent(error),
    )


def error_record(error: BaseException, rank: int) -> dict[str, Any]:
    """What a failing process records of its error: its root cause, as the store's run error.

    The record has the rank whose code raised it, the exception's type and message, its
    traceback from the user's own frames, and what raised it (a metric, a hook); the
    whole traceback stays in the process's output.
    """
    return root_cause(error, rank).to_record()


def cause_of_current_exception(rank: Optional[int], origin: str) -> RootCause:
    """The root cause of the exception being handled now (inside an ``except`` block)."""
    error = sys.exc_info()[1]
    if error is None:
        raise RuntimeError("cause_of_current_exception() is called while handling an exception.")
    return root_cause(error, rank, origin, use_noted=False)


def format_user_traceback(error: BaseException) -> str:
    """One exception with its frames from the first of the user's own on (all frames when none is the user's)."""
    frames = traceback.extract_tb(error.__traceback__)
    first = next((index for index, frame in enumerate(frames) if is_user_file(frame.filename)), 0)
    return (
        "Traceback (most recent call last):\n"
        + "".join(traceback.format_list(frames[first:]))
        + "".join(traceback.format_exception_only(type(error), error))
    )


def _chain(error: BaseException) -> list[BaseException]:
    """The exceptions of ``error``'s chain, the earliest first (as Python prints them)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain[::-1]


def is_user_file(filename: str) -> bool:
    """Whether a frame's file is the user's: neither det-estimator's, Python's nor an installed library's."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_PACKAGE_DIR) and not path.startswith(_LIBRARY_DIRS)


def is_own_file(filename: str) -> bool:
    """Whether a frame's file is det-estimator's own."""
    return not filename.startswith("<") and os.path.abspath(filename).startswith(_PACKAGE_DIR)


def _entry_into_user_code(tb: Optional[types.TracebackType]) -> Optional[types.FrameType]:
    """The user's frame that library code called last: the hook, callback or reducer method that failed.

    ``train.py`` -> ``model.fit`` -> ``MyCallback.on_batch_end`` -> a helper of the user's
    gives ``MyCallback.on_batch_end``.
    """
    entry, caller_is_user = None, False
    while tb is not None:
        is_user = is_user_file(tb.tb_frame.f_code.co_filename)
        if is_user and not caller_is_user:
            entry = tb.tb_frame
        caller_is_user = is_user
        tb = tb.tb_next
    return entry


def _frame_origin(frame: types.FrameType) -> str:
    """``Class.method`` for a method of an object (a hook, a callback, a trial), else the function's name."""
    owner = frame.f_locals.get("self")
    name = frame.f_code.co_name
    return f"{type(owner).__name__}.{name}" if owner is not None else name


def _is_permanent(error: BaseException) -> bool:
    return getattr(type(error), "permanent", False) is True


def _is_own_error(error: BaseException) -> bool:
    """A DetEstimatorError raised by det-estimator itself (matched by name: this module imports none of it)."""
    own = any(cls.__name__ == "DetEstimatorError" for cls in type(error).__mro__)
    return own and error.__traceback__ is not None and not is_user_file(_last_frame_file(error.__traceback__))


def _last_frame_file(tb: types.TracebackType) -> str:
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename


def _is_consequence(error: BaseException) -> bool:
    for link in _chain(error):
        if type(link).__name__ in _CONSEQUENCE_TYPES or any(text in str(link) for text in _CONSEQUENCE_TEXT):
            return True
    return False
