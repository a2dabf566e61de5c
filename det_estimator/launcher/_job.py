"""A job of several processes started together: their output streamed, the first failure ending them all.

Used by ``python -m det_estimator.launch.tensorflow`` and ``...launch.horovod``. Imports
no TensorFlow. Each process runs in a session of its own and is told to die with the
launcher; signals the launcher receives (SIGTERM, SIGINT) are passed on to every
process, so that a job asked to stop pauses as one.
"""

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Optional, TextIO, Union

from det_estimator._host_list import LOCAL_HOSTS, HostSlots, format_hosts
from det_estimator.launcher._launch import output_pipe, script_command, start

# What signal.signal takes and returns.
_SignalHandler = Union[Callable[[int, Optional[FrameType]], Any], int, signal.Handlers, None]

# How often the launcher looks at its processes.
_POLL_SECONDS = 0.05
# What a process on another host does not inherit from the launcher, as horovodrun leaves it
# out: shell functions, the previous directory, and this machine's GPUs (the host has its own).
_NOT_FORWARDED = re.compile(r"BASH_FUNC_.*|OLDPWD|.*CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a job: what to run, where, and the variables it gets on top of the launcher's.

    Attributes:
        rank: its index in the job (its output lines are prefixed with it).
        host: where it runs.
        command: the command line.
        env: variables set for it (the launcher's own environment is inherited).
        unset: variables removed from what it inherits.
    """

    rank: int
    host: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()


def resolve_slots(
    slots: Optional[int],
    hosts: Optional[Sequence[HostSlots]],
    cluster_slots: Optional[int],
    cluster_addrs: Sequence[str],
) -> list[HostSlots]:
    """Where the job's processes run: ``--hosts``, else ``--slots`` here, else the cluster info's, else one here.

    Args:
        slots: ``--slots``, or None.
        hosts: ``--hosts``, or None.
        cluster_slots: the experiment's slots for the trial (``ClusterInfo.slots``), or None
            outside an experiment.
        cluster_addrs: the machines of the trial (``ClusterInfo.container_addrs``); the
            slots are spread evenly over them.

    Raises:
        ValueError: ``--slots`` disagrees with ``--hosts``, or is not positive.
    """
    if hosts:
        if slots is not None and slots != sum(entry.slots for entry in hosts):
            raise ValueError(
                f"Argument `--slots` must equal the slots of `--hosts` when both are given. "
                f"Received: slots={slots}, hosts={format_hosts(hosts)!r}"
            )
        return list(hosts)
    if slots is not None:
        if slots < 1:
            raise ValueError(f"Argument `--slots` must be at least 1. Received: slots={slots}")
        return [HostSlots("localhost", slots)]
    if cluster_slots:
        addrs = list(cluster_addrs) or ["localhost"]
        share, extra = divmod(cluster_slots, len(addrs))
        spread = [HostSlots(addr, share + (index < extra)) for index, addr in enumerate(addrs)]
        return [entry for entry in spread if entry.slots]
    return [HostSlots("localhost", 1)]


def exec_single(command: list[str], unset: Sequence[str] = ()) -> None:
    """Replaces this process with ``command`` (a leading ``python`` is this interpreter); never returns."""
    command = script_command(command)
    env = {key: value for key, value in os.environ.items() if key not in unset}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)


class Job:
    """Runs the processes of a job until all end, or one fails; see :meth:`run`.

    Args:
        processes: what to start.
        cwd: their working directory (default: the launcher's).
        output: where their lines go (default: this process's stdout).
        prefix: prefix each line with ``[rank]``.
        env: the environment they inherit (default: the launcher's).
    """

    def __init__(
        self,
        processes: Sequence[ProcessSpec],
        cwd: Optional[str] = None,
        output: Optional[TextIO] = None,
        prefix: bool = True,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._specs = list(processes)
        self._cwd = cwd or os.getcwd()
        self._env = dict(os.environ if env is None else env)
        self._output = output or sys.stdout
        self._prefix = prefix
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[str]] = []
        self._pumps: list[threading.Thread] = []

    def run(self) -> int:
        """Starts every process and waits; returns the job's exit status.

        0 when every process exited with 0. When one exits otherwise, the others are
        killed at once (a process left alone would wait forever in a collective) and the
        first failure's status is returned (128 + the signal for a process killed by one).
        SIGTERM and SIGINT received meanwhile are passed on to every process.
        """
        previous = self._forward_signals()
        try:
            for spec in self._specs:
                self._start(spec)
            return self._wait()
        finally:
            self.kill()
            for pump in self._pumps:
                pump.join(timeout=5)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start(self, spec: ProcessSpec) -> None:
        env = {key: value for key, value in self._env.items() if key not in spec.unset}
        env.update(spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        command = script_command(spec.command) if spec.host in LOCAL_HOSTS else _ssh_command(spec, self._cwd, env)
        process = start(command, env, self._cwd)
        self._procs.append(process)
        pump = threading.Thread(target=self._copy, args=(spec.rank, process), daemon=True)
        pump.start()
        self._pumps.append(pump)

    def _copy(self, rank: int, process: subprocess.Popen[str]) -> None:
        head = f"[{rank}] " if self._prefix else ""
        for line in output_pipe(process):
            with self._lock:
                self._output.write(head + line)
                self._output.flush()

    def _wait(self) -> int:
        while True:
            statuses = [process.poll() for process in self._procs]
            failed = [(rank, status) for rank, status in enumerate(statuses) if status is not None and status != 0]
            if failed:
                rank, status = failed[0]
                self._pumps[rank].join(timeout=2)  # its last lines (a traceback) first
                with self._lock:
                    self._output.write(
                        f"det-estimator launcher: process {self._specs[rank].rank} exited with status "
                        f"{_exit_status(status)}; stopping the others\n"
                    )
                    self._output.flush()
                return _exit_status(status)
            if all(status == 0 for status in statuses):
                return 0
            time.sleep(_POLL_SECONDS)

    def _forward_signals(self) -> dict[signal.Signals, _SignalHandler]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def forward(sig: int, _frame: Optional[FrameType]) -> None:
            for process in self._procs:
                if process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, sig)

        return {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}

    def kill(self) -> None:
        """Kills every process still running, with whatever it started (its process group)."""
        for process in self._procs:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    process.kill()
        for process in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def _exit_status(returncode: int) -> int:
    """A Popen return code as a shell exit status (a signal N reads as 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _ssh_command(spec: ProcessSpec, cwd: str, env: Mapping[str, str]) -> list[str]:
    """Runs a process on another host over ssh, in the same directory, with the environment a local one gets.

    ``env`` is that environment (the launcher's, with the process's own variables): the
    remote process gets it too, but for what ``_NOT_FORWARDED`` names, as horovodrun
    passes its environment on (the run's cluster info, the config's variables). A leading
    ``python`` is this interpreter there too (every host has the environment at the same
    path), not whichever the remote shell's PATH finds first.
    """
    forwarded = {key: value for key, value in env.items() if not _NOT_FORWARDED.fullmatch(key)}
    variables = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(forwarded.items()))
    unset = " ".join(f"-u {shlex.quote(name)}" for name in spec.unset)
    remote = f"cd {shlex.quote(cwd)} && env {unset} {variables} {shlex.join(script_command(spec.command))}"
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", spec.host, remote]
