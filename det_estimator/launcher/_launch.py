"""Starts the processes of one trial run: directly on one slot, under ``horovodrun --gloo`` on several.

Without Horovod (the current stack), a script on several slots runs under det-estimator's
TensorFlow launcher instead: one process per slot, each with the ``TF_CONFIG`` of a
``MultiWorkerMirroredStrategy`` job, which ``core.init()`` reads its place from.

Imports no TensorFlow. Settings reach the processes through environment variables
(``DET_CLUSTER_INFO`` names the run's info file; ``DET_CHIEF_IP`` and ``DET_CHIEF_PORT``
tell them where the chief listens for object collectives), read on their side by
``det_estimator._info`` and ``det_estimator.core``.

The processes run in a session of their own, so that Ctrl-C in a terminal reaches only
the launching process, which turns it into a pause; they are told to die with it, so
that killing the launcher never leaves processes running on their own.
"""

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Callable, Optional

from det_estimator._host_list import HostSlots, format_hosts
from det_estimator.launcher._hosts import address_towards
from det_estimator.launcher._startup_hook import hooked_command

# `python`, `python3` or `python3.11` at the head of a command means this interpreter,
# which has det-estimator and TensorFlow (the one on PATH may not).
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# Entrypoints that start their own processes on every slot.
_TENSORFLOW_LAUNCHER = "det_estimator.launch.tensorflow"
_SELF_LAUNCHING = ("det_estimator.launch.horovod", _TENSORFLOW_LAUNCHER)


def _horovodrun() -> Path:
    """Where horovodrun is when Horovod is installed: beside this interpreter."""
    return Path(sys.executable).with_name("horovodrun")


def horovod_installed() -> bool:
    """Whether horovodrun is installed beside this interpreter (the estimator stack builds it; the current has none)."""
    return _horovodrun().exists()


def horovodrun_command(
    num_processes: int, command: list[str], hosts: Optional[Sequence[HostSlots]] = None
) -> list[str]:
    """The command line that runs ``command`` on ``num_processes`` slots of ``hosts`` (default: this machine)."""
    horovodrun = _horovodrun()
    if not horovodrun.exists():
        raise FileNotFoundError(
            f"horovodrun was not found next to {sys.executable}; install Horovod with TensorFlow and Gloo "
            "(scripts/setup.sh does) to run a trial on several processes."
        )
    host_list = format_hosts(hosts) if hosts else f"localhost:{num_processes}"
    return [str(horovodrun), "-np", str(num_processes), "-H", host_list, "--gloo", *command]


def tensorflow_launcher_command(
    num_processes: int, command: list[str], hosts: Optional[Sequence[HostSlots]] = None
) -> list[str]:
    """The command line that runs ``command`` on ``num_processes`` slots of ``hosts``, each with its ``TF_CONFIG``."""
    placement = ["--hosts", format_hosts(hosts)] if hosts else ["--slots", str(num_processes)]
    return [sys.executable, "-m", _TENSORFLOW_LAUNCHER, *placement, "--", *command]


def worker_command() -> list[str]:
    """det-estimator's own worker, which runs a trial class."""
    return [sys.executable, "-m", "det_estimator.worker"]


def script_command(command: list[str]) -> list[str]:
    """A user's command, with a leading ``python``/``python3`` replaced by this interpreter."""
    if command and _PYTHON.match(os.path.basename(command[0])):
        return [sys.executable, *command[1:]]
    return list(command)


def is_self_launching(command: list[str]) -> bool:
    """Whether the command is ``python -m det_estimator.launch.<engine> -- ...``, which starts every slot itself."""
    return len(command) > 2 and command[1] == "-m" and command[2] in _SELF_LAUNCHING


def process_command(
    command: list[str], slots: int, hosts: Optional[Sequence[HostSlots]], startup_hook: bool = False
) -> list[str]:
    """What to start for a run of ``command`` on ``slots`` processes.

    One slot on this machine runs the command itself; several (or any on other hosts)
    run it under horovodrun, unless the command is one of det-estimator's own launchers.
    Where Horovod is not installed, a script, or the worker of a trial class, runs under
    the TensorFlow launcher instead (a TFKerasTrial then trains under a
    ``MultiWorkerMirroredStrategy``). With ``startup_hook``, every process horovodrun
    starts (or the one process, or the launcher that starts them) runs the context
    directory's ``startup-hook.sh`` first, once per host (``_startup_hook``).
    """
    run = hooked_command(command) if startup_hook else command
    if is_self_launching(command) or (slots == 1 and hosts is None):
        return run
    if not horovod_installed():
        launched = tensorflow_launcher_command(slots, command, hosts)
        return hooked_command(launched) if startup_hook else launched
    return horovodrun_command(slots, run, hosts)


def free_port() -> int:
    """A TCP port free on this machine now, for the chief of a run to listen on."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def chief_address(hosts: Optional[Sequence[HostSlots]]) -> str:
    """Where the other processes reach the chief: the first host of ``hosts``, else this machine.

    A first host named ``localhost`` is this machine; when other hosts take part, they
    cannot reach it at 127.0.0.1 (their own), so it is named by its address on the way
    to them.
    """
    if not hosts:
        return "127.0.0.1"
    if not hosts[0].is_local:
        return hosts[0].host
    others = [entry.host for entry in hosts if not entry.is_local]
    return address_towards(others[0]) if others else "127.0.0.1"


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGKILL it when its parent dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


# Runs a command so that whatever it starts ends with it (see the module's docstring).
_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
# How long ``end_supervised`` waits for the supervisor to end the processes below it.
_END_SECONDS = 10.0


def start(
    command: list[str], env: dict[str, str], cwd: Optional[str] = None, supervised: bool = False
) -> subprocess.Popen[str]:
    """Starts ``command`` in a session of its own, its stdout and stderr merged into one text pipe (``output_pipe``).

    ``supervised`` (on Linux) runs it under the supervisor of ``_supervisor.py``: every
    process it starts, however deep, ends when it ends, when :func:`end_supervised` is
    called, and when this process dies, SIGKILL included. Its exit status is the command's.
    """
    if supervised and sys.platform.startswith("linux"):
        command = [sys.executable, "-S", str(_SUPERVISOR), "--", *command]
    return subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def end_supervised(process: subprocess.Popen[str]) -> None:
    """Ends a process :func:`start` supervised and everything it started: at once, without a checkpoint."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGUSR2)  # the supervisor's END_EVERYTHING
    try:
        process.wait(timeout=_END_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()


def output_pipe(process: subprocess.Popen[str]) -> IO[str]:
    """The text pipe of a process that :func:`start` started: its stdout and stderr, merged.

    Raises:
        ValueError: the process has no such pipe (it was not started by :func:`start`).
    """
    if process.stdout is None:
        raise ValueError(f"process {process.pid} has no output pipe: it was not started by launcher.start")
    return process.stdout


def describe(command: list[str]) -> str:
    """The command as a shell would show it."""
    return shlex.join(command)


@contextlib.contextmanager
def pause_on_signals(request_pause: Callable[[], Any]) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call ``request_pause`` instead of ending the process.

    The previous handlers come back on leaving. Only the main thread can install
    signal handlers; elsewhere this does nothing.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: request_pause()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
