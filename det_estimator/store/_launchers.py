"""Whether the process that launched an experiment or a job still runs, and its heartbeat.

A launcher records its pid, host and start time in the store. A record left ACTIVE
by a launcher that is gone (killed, or its machine restarted) reads as INTERRUPTED.

A launcher on this machine is checked exactly, by its pid and start time. One on another
machine cannot be: it refreshes a heartbeat instead (``launcher_seen_at``, every
:data:`HEARTBEAT_SECONDS`, from a daemon thread: :class:`LauncherHeartbeat`), and counts
as alive while its heartbeat is younger than :data:`LEASE_SECONDS`. Heartbeats are
written and their age read with the database's own clock (:func:`database_clock`), so
that on PostgreSQL a host whose clock is off does not shorten or stretch the lease.
"""

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol

from det_estimator._pids import process_exists
from det_estimator.store._records import State

# How often a launcher refreshes its heartbeat.
HEARTBEAT_SECONDS = 5.0
# How old the heartbeat of a launcher on another machine may be before it is taken for gone:
# six beats, so that a write delayed by a busy database, or a short restart of it, loses no lease.
LEASE_SECONDS = 30.0


def database_clock(is_sqlite: bool) -> str:
    """The database's time now, in seconds since the epoch, as an SQL expression.

    On PostgreSQL it is the server's clock, one for every host. An SQLite store has no
    server: its clock is that of the host that runs the statement, so hosts sharing an
    SQLite store need clocks that agree to well within :data:`LEASE_SECONDS` (as NTP keeps them).
    """
    if is_sqlite:
        return "((julianday('now') - 2440587.5) * 86400.0)"
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


def launcher_silence(is_sqlite: bool, table: str) -> str:
    """SQL of a column ``launcher_silence``: seconds since ``table``'s launcher's heartbeat, by the database's clock.

    A record never beaten (one of a store before heartbeats) is as silent as can be.
    """
    return f"({database_clock(is_sqlite)} - COALESCE({table}.launcher_seen_at, 0)) AS launcher_silence"


def launcher_columns(pid: Optional[int] = None) -> tuple[int, str, Optional[int]]:
    """What the store records of a launcher, process ``pid`` (default: this one) on this machine.

    Returns:
        ``(launcher_pid, launcher_host, launcher_started)``, in the order of their columns.
    """
    pid = os.getpid() if pid is None else pid
    return pid, socket.gethostname(), process_start_time(pid)


def state_as_seen(
    stored: State, pid: Optional[int], host: Optional[str], started: Optional[int], silence: Optional[float] = None
) -> State:
    """``stored``, but INTERRUPTED for ACTIVE when the launcher (``pid`` on ``host``, started at ``started``) is gone.

    Only the view changes: the record stays ACTIVE until a resume takes it over.
    ``silence`` is as :func:`launcher_alive` takes it.
    """
    if stored == State.ACTIVE and not launcher_alive(pid, host, started, silence):
        return State.INTERRUPTED
    return stored


def launcher_alive(
    pid: Optional[int], host: Optional[str], started: Optional[int] = None, silence: Optional[float] = None
) -> bool:
    """Whether the launcher still runs.

    ``started`` is the launcher's :func:`process_start_time`, when it was recorded: a
    process that has the pid now but started at another time is not the launcher, whose
    pid the system gave out again after it died.

    Args:
        pid: the launcher's process, on ``host``.
        host: the machine it runs on.
        started: its start time, when recorded.
        silence: on another machine, the seconds since its heartbeat, by the database's
            clock (the store's ``launcher_silence`` column): alive while under
            :data:`LEASE_SECONDS`. None where the store is not read (a trial's process
            asking after its launcher): one on another machine is then assumed alive.
    """
    if pid is None:
        return True
    if host != socket.gethostname():
        return silence is None or silence < LEASE_SECONDS
    if not process_exists(pid):
        return False
    if started is not None:
        now = process_start_time(pid)
        return now is None or now == started
    return True


def process_start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot (Linux's ``/proc``); None where unknown.

    Unlike a pid, which the system reuses, it tells one process from a later one of the same pid.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses;
    # the start time is field 22, the 20th after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Launched:
    """A record this process launches, whose heartbeat it refreshes.

    Attributes:
        table: ``experiments`` or ``jobs``.
        id: the record's id.
    """

    table: str
    id: int


class HeartbeatWriter(Protocol):
    """The store connection of the heartbeat's thread (an ``ExperimentStore`` of its own)."""

    def refresh_heartbeats(self, launched: Collection[Launched]) -> set[Launched]:
        """Refreshes the heartbeat of those of ``launched`` still launched by this process; returns them."""

    def close(self) -> None:
        """Closes the connection."""


class LauncherHeartbeat:
    """Refreshes, every :data:`HEARTBEAT_SECONDS`, the heartbeat of every record this process launches.

    From a daemon thread, through a store connection of its own, which it opens at its
    first beat and closes when it ends. A record stops being beaten when :meth:`discard`-ed
    (its experiment paused or ended, its job ended), and once it is no longer launched by
    this process (claimed by another launcher after this one's lease ran out). The thread ends
    when nothing is left to beat, when :meth:`stop`-ped, and when the process's main thread
    has ended: a process whose launching code is gone, kept up only by some other thread,
    must not keep its records alive.

    Args:
        connect: opens the thread's store connection.
        interval: seconds between beats (default: :data:`HEARTBEAT_SECONDS`).
    """

    def __init__(self, connect: Callable[[], HeartbeatWriter], interval: Optional[float] = None) -> None:
        self._connect = connect
        self._interval = HEARTBEAT_SECONDS if interval is None else interval
        self._lock = threading.Lock()
        self._launched: set[Launched] = set()
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def add(self, launched: Launched) -> None:
        """Beats ``launched`` from now on (its launcher columns were just written with a fresh heartbeat)."""
        with self._lock:
            self._launched.add(launched)
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(target=self._run, name="det-estimator-launcher-heartbeat", daemon=True)
                self._thread.start()

    @property
    def beating(self) -> frozenset[Launched]:
        """The records beaten now: none once the thread has ended."""
        with self._lock:
            return frozenset(self._launched) if self._thread is not None else frozenset()

    def discard(self, launched: Launched) -> None:
        """Stops beating ``launched``."""
        with self._lock:
            self._launched.discard(launched)

    def stop(self) -> None:
        """Stops beating anything, and waits for the thread to end."""
        with self._lock:
            self._stopped.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        writer: Optional[HeartbeatWriter] = None
        try:
            while not self._stopped.wait(self._interval) and threading.main_thread().is_alive():
                with self._lock:
                    launched = frozenset(self._launched)
                    if not launched:
                        self._thread = None
                        return
                try:
                    if writer is None:
                        writer = self._connect()
                    kept = writer.refresh_heartbeats(launched)
                except Exception:  # noqa: BLE001 - the database away for a moment: the next beat tries again
                    continue
                with self._lock:
                    self._launched -= launched - kept
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
