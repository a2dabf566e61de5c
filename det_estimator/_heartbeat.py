"""Heartbeats: how the launcher of a trial run sees that its processes make progress, and where they are stuck.

The channel is the run's own directory, which holds the pause file and which every host
of the run sees. Each process counts its progress (:func:`beat`: a training batch, a
validation step, a checkpoint) and its pause watcher's thread, which polls that
directory anyway, writes the count into ``heartbeat-<rank>.json`` when it changed
(:class:`HeartbeatWriter`). A batch therefore only adds one to a number.

When the launcher has seen no count change on any process for the config's
``hang_timeout_seconds``, it creates ``dump-stacks`` there. Each process's watcher then
dumps the Python stack of every thread with ``faulthandler`` to its stderr (the trial's
log) and writes ``stuck-<rank>.json``: the innermost frame of the user's code, else of
det-estimator's, that its threads are in (:class:`StuckPlace`). A thread, not a signal,
answers: the launcher reaches the processes of every host this way. A process whose
thread cannot run (another holds Python's interpreter lock, in a regular expression or
an extension's loop) cannot answer: the launcher then sends :data:`DUMP_SIGNAL` to those
of its own host, for which each process registered ``faulthandler``'s dump, written
from the signal handler without the lock. SIGUSR1 is no signal the launcher, the
supervisor (SIGUSR2) or a pause (SIGTERM, SIGINT) uses.

Imports nothing of det-estimator's but :mod:`det_estimator._root_cause`, so that the
launcher and the processes both use it.
"""

import contextlib
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from det_estimator import _root_cause

# The file whose creation asks every process of the run to dump its stacks.
DUMP_REQUEST = "dump-stacks"
_HEARTBEAT = "heartbeat-{rank}.json"
_STUCK = "stuck-{rank}.json"
# The signal that makes a process dump its stacks when its watcher thread cannot run.
DUMP_SIGNAL = signal.SIGUSR1
# A changed count is written at most this often: the launcher's watch counts in minutes.
_WRITE_INTERVAL_SECONDS = 1.0

# This process's progress so far; only ever grows.
_beats = 0


def beat() -> None:
    """Counts one step of progress of this process: a training batch, a validation step, a checkpoint.

    Costs an addition: the pause watcher's thread writes the count for the launcher.
    """
    global _beats
    _beats += 1


def beats() -> int:
    """This process's progress count so far."""
    return _beats


@dataclass(frozen=True)
class StuckPlace:
    """Where a process is while it makes no progress: the innermost frame of the user's code, else of det-estimator's.

    Attributes:
        rank: the process's rank.
        file: the frame's source file.
        line: its line.
        function: its function.
        users: whether it is the user's code (else det-estimator's).
        thread: the name of the thread it is in.
    """

    rank: int
    file: str
    line: int
    function: str
    users: bool
    thread: str

    def describe(self) -> str:
        """``rank 1 in cross_slot_reduce (reducers.py:12)``."""
        whose = "" if self.users else "det-estimator's "
        return f"rank {self.rank} in {whose}{self.function} ({self.file}:{self.line})"

    def frame_line(self) -> str:
        """The place as a traceback prints a frame."""
        return f'  File "{self.file}", line {self.line}, in {self.function}'


def heartbeat_path(directory: Path, rank: int) -> Path:
    return directory / _HEARTBEAT.format(rank=rank)


def stuck_path(directory: Path, rank: int) -> Path:
    return directory / _STUCK.format(rank=rank)


@dataclass(frozen=True)
class Heartbeat:
    """What a process last wrote of its progress.

    Attributes:
        rank: its rank.
        beats: its progress count.
        pid: its process id, on ``host``.
        host: the machine it runs on.
    """

    rank: int
    beats: int
    pid: int
    host: str


def read_heartbeats(directory: Path) -> dict[int, Heartbeat]:
    """Rank to heartbeat, of every process that wrote its heartbeat into ``directory`` so far."""
    found: dict[int, Heartbeat] = {}
    for path in directory.glob(_HEARTBEAT.format(rank="*")):
        record = _read_json(path)
        with contextlib.suppress(TypeError, KeyError, ValueError):  # not a heartbeat: no progress to read
            heartbeat = Heartbeat(**(record or {}))
            found[int(heartbeat.rank)] = heartbeat
    return found


def read_beats(directory: Path) -> dict[int, int]:
    """Rank to progress count, of every process that wrote its heartbeat into ``directory`` so far."""
    return {rank: heartbeat.beats for rank, heartbeat in read_heartbeats(directory).items()}


def read_stuck(directory: Path) -> dict[int, Optional[StuckPlace]]:
    """Rank to the place it is stuck in, of every process that answered a dump request (None: no frame found)."""
    found: dict[int, Optional[StuckPlace]] = {}
    for path in directory.glob(_STUCK.format(rank="*")):
        record = _read_json(path)
        if record is None:
            continue
        with contextlib.suppress(TypeError, KeyError, ValueError):  # not an answer of this format
            place = record.get("place")
            found[int(record["rank"])] = None if place is None else StuckPlace(**place)
    return found


def _read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # gone, or replaced meanwhile
        return None


def _write_json(path: Path, record: Mapping[str, Any]) -> None:
    """Writes ``record`` whole or not at all: the launcher never reads half a file."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(record), encoding="utf-8")
    os.replace(partial, path)


class HeartbeatWriter:
    """This process's side of the channel; its pause watcher's thread calls :meth:`tick` as it polls.

    Args:
        directory: the run's own directory (the pause file's).
        rank: this process's rank.
    """

    def __init__(self, directory: Path, rank: int) -> None:
        self._directory = directory
        self._rank = rank
        self._written: Optional[int] = None
        self._written_at = 0.0
        self._dumped = False
        # Unless the trial's code handles the signal itself.
        with contextlib.suppress(ValueError, OSError, RuntimeError):  # stderr without a file descriptor
            if signal.getsignal(DUMP_SIGNAL) in (signal.SIG_DFL, None):
                faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True)
        # Now, not at the watcher thread's first tick: a process whose code takes the
        # interpreter lock for good before that tick is still known by its pid, to be signalled.
        # (Its time left at 0: the first change after it is written at the next tick, as before.)
        self._write(_beats, 0.0)

    def tick(self) -> None:
        """Writes the progress count if it changed; dumps the stacks once, when the launcher asks."""
        now = time.monotonic()
        count = _beats
        if count != self._written and now - self._written_at >= _WRITE_INTERVAL_SECONDS:
            self._write(count, now)
        if not self._dumped and (self._directory / DUMP_REQUEST).exists():
            self._dumped = True
            self.dump_stacks()

    def _write(self, count: int, now: float) -> None:
        with contextlib.suppress(OSError):  # the run's directory is gone: the run is ending
            record = Heartbeat(self._rank, count, os.getpid(), socket.gethostname())
            _write_json(heartbeat_path(self._directory, self._rank), asdict(record))
            self._written, self._written_at = count, now

    def dump_stacks(self) -> None:
        """Dumps every thread's Python stack to stderr and writes where this process is stuck."""
        place = stuck_place(self._rank, sys._current_frames(), threading.get_ident())
        with contextlib.suppress(Exception):  # stderr replaced by an object without a file descriptor
            sys.stderr.flush()
            where = place.describe() if place else f"rank {self._rank}"
            print(
                f"det-estimator: no progress on any process for a while; {where}. Python stacks of rank "
                f"{self._rank} (most recent call first):",
                file=sys.stderr,
                flush=True,
            )
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        with contextlib.suppress(OSError):
            record = {"rank": self._rank, "place": None if place is None else asdict(place)}
            _write_json(stuck_path(self._directory, self._rank), record)


def stuck_place(rank: int, frames: Mapping[int, Any], watching_thread: int) -> Optional[StuckPlace]:
    """Where a process is stuck, from its threads' current frames (``sys._current_frames()``).

    The innermost frame of the user's own code wins, the main thread's first (a script's
    line that waits in a collective), then any other thread's (a reducer sleeping in a
    TensorFlow thread, say); else the innermost of det-estimator's in the main thread (a
    harness's collective waiting for a peer). The watching thread itself is left out.
    """
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    own: Optional[StuckPlace] = None
    # The main thread first: of the user's frames, its own are the likeliest place.
    for ident in sorted(frames, key=lambda ident: ident != main):
        if ident == watching_thread:
            continue
        for frame in reversed(traceback.extract_stack(frames[ident])):
            users = _root_cause.is_user_file(frame.filename)
            if users or _root_cause.is_own_file(frame.filename):
                place = StuckPlace(
                    rank, frame.filename, frame.lineno or 0, frame.name, users, names.get(ident, hex(ident))
                )
                if users:
                    return place
                if own is None and ident == main:
                    own = place
    return own
