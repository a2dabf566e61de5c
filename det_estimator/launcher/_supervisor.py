"""The supervisor of a run's processes: whatever they start ends with the run.

``python _supervisor.py -- COMMAND...`` runs COMMAND (the run's one process, or
horovodrun and its ranks) as its child and stays its parent. Linux makes it the
"subreaper" of everything below it: a process the run starts and leaves behind (a
data-loading pool, a local server, a ``tf.data`` service started by a rank) is adopted
by the supervisor rather than by init when its parent dies, and ended: its parent, a
rank, has ended. When COMMAND ends, and when the launcher dies (SIGKILL included: Linux
then signals the supervisor), every process left below it is ended too. The launcher
asks for the same with SIGUSR2 (``launcher.end_supervised``).

COMMAND's exit status is the supervisor's: the same number, or death by the same signal.
SIGTERM, SIGINT and SIGHUP go on to COMMAND. Run by path, not imported from the package,
so that it starts in milliseconds; it imports nothing of det-estimator's.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Optional

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# The signal Linux sends the supervisor when the launcher dies, and the launcher sends to end everything.
END_EVERYTHING = signal.SIGUSR2
# How long the processes left below get to exit after SIGTERM before SIGKILL.
_GRACE_SECONDS = 3.0
# How often the supervisor looks for processes it adopted.
_POLL_SECONDS = 0.5


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value)


def _descendants(root: int) -> list[int]:
    """The processes below ``root``, read from /proc (children before their own children)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, queue = [], [root]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def end_everything_below(root: int, grace_seconds: float = _GRACE_SECONDS) -> None:
    """SIGTERM to every process below ``root``, then SIGKILL to those still there after ``grace_seconds``."""
    for pid in _descendants(root):
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap_any()
        if not _descendants(root):
            return
        time.sleep(0.05)
    for pid in _descendants(root):
        _signal(pid, signal.SIGKILL)
    _reap_any()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone, or not ours
        os.kill(pid, sig)


def _reap_any() -> None:
    """Collects the exit of adopted processes that ended, so they leave the process table."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_orphans(me: int, child: int, orphans: dict[int, float]) -> None:
    """Ends the processes adopted since their parent died: SIGTERM at once, SIGKILL after the grace time.

    A helper whose rank has ended (paused, failed, killed) would otherwise run on, and
    keep the rank's output pipe open, which horovodrun waits to see closed before it ends.
    """
    now = time.monotonic()
    adopted = set(_children(me)) - {child}
    for pid in list(orphans):
        if pid not in adopted:
            del orphans[pid]
    for pid in adopted:
        if pid not in orphans:
            orphans[pid] = now
            _signal(pid, signal.SIGTERM)
        elif now - orphans[pid] > _GRACE_SECONDS:
            _signal(pid, signal.SIGKILL)


def _children(parent: int) -> list[int]:
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as children:
            return [int(pid) for pid in children.read().split()]
    except OSError:  # a kernel without the file: read every process's parent
        return [pid for pid in _descendants(parent) if _parent_of(pid) == parent]


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return 0


def _as_exit(status: int) -> None:
    """Ends the supervisor as COMMAND ended: with its exit status, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # whose handlers cannot be set, nor need to be
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)  # a signal that does not end a process by default
        sys.exit(128 + sig)
    sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit("usage: _supervisor.py -- COMMAND...")
    command = argv[argv.index("--") + 1 :]
    launcher = os.getppid()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    me = os.getpid()
    ending = {"everything": False}

    def end_now(*_: object) -> None:
        ending["everything"] = True
        end_everything_below(me, grace_seconds=0.5)

    signal.signal(END_EVERYTHING, end_now)
    # Linux signals the supervisor when the launcher dies; set after the handler, and
    # checked once more in case the launcher died before it was set.
    _prctl(_PR_SET_PDEATHSIG, END_EVERYTHING)
    if os.getppid() != launcher:
        sys.exit(1)
    child = subprocess.Popen(command, preexec_fn=lambda: _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL))
    for forwarded in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(forwarded, lambda sig, _frame: _signal(child.pid, sig))
    status: Optional[int] = None
    orphans: dict[int, float] = {}  # adopted process -> when it was first seen
    while status is None:
        try:
            pid, waited = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == child.pid:
            status = waited
        elif pid == 0:
            _end_orphans(me, child.pid, orphans)
            time.sleep(_POLL_SECONDS)
    end_everything_below(me)
    if ending["everything"] and status is None:
        sys.exit(1)
    _as_exit(status if status is not None else 1 << 8)


if __name__ == "__main__":
    main(sys.argv)
