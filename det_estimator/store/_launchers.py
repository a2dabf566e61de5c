"""Whether the process that launched an experiment or a job still runs.

A launcher records its pid, host and start time in the store. A record left ACTIVE
by a launcher that is gone (killed, or its machine restarted) reads as INTERRUPTED.
"""

import os
import socket
from pathlib import Path
from typing import Optional

from det_estimator._pids import process_exists
from det_estimator.store._records import State


def launcher_columns(pid: Optional[int] = None) -> tuple[int, str, Optional[int]]:
    """What the store records of a launcher, process ``pid`` (default: this one) on this machine.

    Returns:
        ``(launcher_pid, launcher_host, launcher_started)``, in the order of their columns.
    """
    pid = os.getpid() if pid is None else pid
    return pid, socket.gethostname(), process_start_time(pid)


def state_as_seen(stored: State, pid: Optional[int], host: Optional[str], started: Optional[int]) -> State:
    """``stored``, but INTERRUPTED for ACTIVE when the launcher (``pid`` on ``host``, started at ``started``) is gone.

    Only the view changes: the record stays ACTIVE until a resume takes it over.
    """
    if stored == State.ACTIVE and not launcher_alive(pid, host, started):
        return State.INTERRUPTED
    return stored


def launcher_alive(pid: Optional[int], host: Optional[str], started: Optional[int] = None) -> bool:
    """Whether the launcher still runs; assumed so when it runs on another machine.

    ``started`` is the launcher's :func:`process_start_time`, when it was recorded: a
    process that has the pid now but started at another time is not the launcher, whose
    pid the system gave out again after it died.
    """
    if pid is None or host != socket.gethostname():
        return True
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
