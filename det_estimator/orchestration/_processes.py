"""The processes of one trial run, and the slots the experiment's trials share."""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator import _heartbeat, _info, launcher
from det_estimator._host_list import HostSlots
from det_estimator.lifecycle import Ending, ErrorKind, RunError, RunLifecycle
from det_estimator.orchestration._display import Display
from det_estimator.orchestration._hangs import HangState, HangWatch, hang_error
from det_estimator.store import (
    ExperimentRecord,
    ExperimentStore,
    LogOwner,
    LogWriter,
    State,
    TrialRecord,
    TrialRunRecord,
    launcher_alive,
    launcher_columns,
)

# What horovodrun prints when one of its processes ends badly: "Process 1 exit with status code -9."
_PROCESS_EXIT = re.compile(r"Process (\d+) exit with status code (-?\d+)")
# The exception horovodrun raises when a process of the job failed, in its own traceback.
_HOROVODRUN_FAILURE = "Horovod detected that one or more processes exited with non-zero status"
# What horovodrun prints, then raises, when it cannot ssh into a host: "ssh not successful
# for host h2:" and ssh's own lines, then "RuntimeError: could not connect to some hosts via ssh".
_SSH_FAILED_HOST = re.compile(r"^ssh not successful for host (.+):$")
_HOROVODRUN_SSH_FAILURE = "could not connect to some hosts via ssh"


@dataclass(frozen=True)
class Allocation:
    """Slots given to one trial run: how many, and on which hosts (None: this machine)."""

    slots: int
    hosts: Optional[tuple[HostSlots, ...]] = None


class SlotPool:
    """The slots an experiment's trials share: a number on this machine, or ``host:slots`` entries.

    Args:
        budget: slots on this machine, when ``hosts`` is None.
        hosts: the machines and their slots, or None.
    """

    def __init__(self, budget: int, hosts: Optional[Sequence[HostSlots]] = None) -> None:
        if hosts:
            # A host named twice has the slots of both entries: counted once, the pool would
            # hold fewer slots than the experiment was given, and a trial needing all of them
            # would wait for ever.
            self._free: dict[str, int] = {}
            for entry in hosts:
                self._free[entry.host] = self._free.get(entry.host, 0) + entry.slots
        else:
            self._free = {"": budget}
        self._remote = bool(hosts)

    @property
    def total(self) -> int:
        """The slots free now."""
        return sum(self._free.values())

    def allocate(self, slots: int) -> Optional[Allocation]:
        """Takes ``slots`` slots for a trial run; None when too few are free.

        A trial goes on one host when one has room, else it spans hosts.
        """
        if self.total < slots:
            return None
        if not self._remote:
            self._free[""] -= slots
            return Allocation(slots)
        for host, free in self._free.items():
            if free >= slots:
                self._free[host] -= slots
                return Allocation(slots, (HostSlots(host, slots),))
        taken: list[HostSlots] = []
        for host in self._free:
            share = min(self._free[host], slots - sum(entry.slots for entry in taken))
            if share:
                self._free[host] -= share
                taken.append(HostSlots(host, share))
        return Allocation(slots, tuple(taken))

    def release(self, allocation: Allocation) -> None:
        """Gives back what :meth:`allocate` took."""
        if allocation.hosts is None:
            self._free[""] += allocation.slots
            return
        for entry in allocation.hosts:
            self._free[entry.host] += entry.slots


class RunProcesses:
    """The processes of one run, a trial's or a job's, as :func:`start_processes` started them.

    Everything they print is handed, line by line, to the ``on_line`` they were started with.
    """

    def __init__(self, process: subprocess.Popen, pump: threading.Thread) -> None:
        self._process = process
        self._pump = pump

    def poll(self) -> Optional[int]:
        """Their exit status once they ended, else None."""
        return self._process.poll()

    def wait(self) -> int:
        """Waits for them to end, and for their last lines to be handed on; returns their exit status."""
        status = self._process.wait()
        self._pump.join(timeout=30)
        return status

    def terminate(self) -> None:
        """Asks them to end (SIGTERM)."""
        self._process.terminate()

    def kill(self) -> None:
        """Ends them at once, if they still run, with every process they started."""
        launcher.end_supervised(self._process)


def start_processes(
    info: _info.ClusterInfo,
    command: list[str],
    cwd: str,
    scratch: Path,
    on_line: Callable[[str], None],
    hosts: Optional[Sequence[HostSlots]] = None,
    environment: Optional[dict[str, str]] = None,
) -> RunProcesses:
    """Starts the processes of a run: ``command`` on each of ``info.slots`` slots; the one place that does.

    The run's info is written into ``scratch`` and named by ``DET_CLUSTER_INFO`` in every
    process, with where the chief listens (``DET_CHIEF_IP``, ``DET_CHIEF_PORT``); on
    several slots (or other hosts) the command runs under horovodrun. A ``startup-hook.sh``
    in ``cwd`` (the context directory) runs before the command, once per host. A
    PostgreSQL password in the environment goes into a file in ``scratch`` instead
    (:func:`~det_estimator.launcher.without_store_password`).

    Args:
        info: the run's info (:meth:`RunLifecycle.begin` or ``begin_job`` made it).
        command: what each slot runs (the worker, or the user's script).
        cwd: the directory they run in.
        scratch: a directory for the run's own files, every host sees it.
        on_line: given every line they print, from a thread of its own.
        hosts: the machines they run on (``--hosts``); None for this one.
        environment: variables set in every process, on every host (the config's
            ``environment.environment_variables``).
    """
    info_path = scratch / "info.json"
    info.write(info_path)
    # horovodrun passes its own environment on to the processes it starts over ssh, so
    # the config's variables reach the other hosts too.
    env = dict(
        os.environ,
        **(environment or {}),
        **{
            environment_variables.CLUSTER_INFO: str(info_path),
            environment_variables.CHIEF_IP: launcher.chief_address(hosts),
            environment_variables.CHIEF_PORT: str(launcher.free_port()),
            "PYTHONUNBUFFERED": "1",
        },
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # horovodrun writes the environment on the command lines it runs, which `ps` shows.
    env = launcher.without_store_password(env, scratch)
    # Supervised: what the run's processes start (a data-loading pool, a server) ends with
    # the run, also when this process is killed.
    # The context directory's startup-hook.sh runs first, once per host, as in the reference.
    startup_hook = launcher.has_startup_hook(cwd)
    process = launcher.start(
        launcher.process_command(command, info.slots, hosts, startup_hook), env, cwd, supervised=True
    )

    def copy_output() -> None:
        for line in launcher.output_pipe(process):
            on_line(line)

    pump = threading.Thread(target=copy_output, daemon=True)
    pump.start()
    return RunProcesses(process, pump)


@dataclass(frozen=True)
class FinishedRun:
    """How a launched run of a trial ended.

    Attributes:
        state: the state the run ended in.
        first_failure: ``(rank, exit status)`` of the first process that failed, when the
            run failed and its log tells.
        trained: whether the run completed a batch after it started (its recorded
            progress went past the batches it resumed from).
    """

    state: State
    first_failure: Optional[tuple[int, int]] = None
    trained: bool = True


class TrialProcess:
    """One run of a trial in launched processes: polled, paused and finished by the experiment's loop.

    :meth:`launch` records the run and starts its processes. Everything the processes
    print goes to the trial's log (after a header line naming the run), and to the
    display with ``verbose``.

    Args:
        store: the experiment store.
        trial: the trial the run is of.
        allocation: its slots, and their hosts.
        info: what the run's processes know of it.
        scratch: the run's own directory (the pause file); removed when the run finishes.
        log: the trial's log.
        processes: the run's processes.
        display: where the launcher's messages go.
        hang_timeout_seconds: how long no process may make progress before the run is
            ended as hung (see :mod:`~det_estimator.orchestration._hangs`); 0: never.
    """

    def __init__(
        self,
        store: ExperimentStore,
        trial: TrialRecord,
        allocation: Allocation,
        info: _info.ClusterInfo,
        scratch: tempfile.TemporaryDirectory,
        log: LogWriter,
        processes: RunProcesses,
        display: Optional[Display] = None,
        hang_timeout_seconds: float = 0,
    ) -> None:
        self.trial = trial
        self.allocation = allocation
        self.info = info
        self._store = store
        self._lifecycle = RunLifecycle(store)
        self._scratch = scratch
        self._log = log
        self._processes = processes
        self._display = display
        self._hang = HangWatch(hang_timeout_seconds, allocation.slots)
        self.stopped = False

    @classmethod
    def launch(
        cls,
        store: ExperimentStore,
        experiment: ExperimentRecord,
        trial: TrialRecord,
        allocation: Allocation,
        display: Display,
        verbose: bool,
        environment: Optional[dict[str, str]] = None,
        hang_timeout_seconds: float = 0,
    ) -> "TrialProcess":
        """Records a run of ``trial`` and starts its processes.

        Args:
            store: the experiment store.
            experiment: the experiment.
            trial: the trial to run.
            allocation: its slots, and their hosts.
            display: where ``verbose`` output goes.
            verbose: show the processes' output.
            environment: variables set in every process of the run, on every host (the
                config's ``environment.environment_variables``).
            hang_timeout_seconds: the config's ``hang_timeout_seconds`` (0: no hang watch).
        """
        hosts, slots = allocation.hosts, allocation.slots
        # With other hosts, the run's files go beside the checkpoints, on the shared file system.
        shared = str(Path(trial.checkpoint_dir).parent) if hosts else None
        if shared is not None:
            os.makedirs(shared, exist_ok=True)
        scratch = _scratch_directory(shared)
        addresses = tuple(entry.host for entry in hosts) if hosts else ("localhost",)
        info = RunLifecycle(store).begin(
            experiment.id,
            trial.id,
            pause_file=str(Path(scratch.name) / "pause"),
            container_addrs=addresses,
            slots=slots,
            # This process, so that the run's processes notice when it is gone (see PauseWatcher).
            launcher=launcher_columns(),
            search_driven=True,
        )
        command = (
            launcher.worker_command() if experiment.command is None else launcher.script_command(experiment.command)
        )
        log = store.log_writer(LogOwner.trial(trial.id), display.message)
        log.write(_run_header(store, info))

        def output_line(line: str) -> None:
            log.write(line)
            if verbose:
                display.echo(line)

        processes = start_processes(
            info,
            command,
            experiment.context_dir,
            Path(scratch.name),
            output_line,
            hosts=hosts,
            environment=dict(environment or {}),
        )
        return cls(store, trial, allocation, info, scratch, log, processes, display, hang_timeout_seconds)

    def poll(self) -> Optional[int]:
        """The processes' exit status once they ended, else None."""
        return self._processes.poll()

    def watch_for_hang(self) -> None:
        """Ends the run as hung once no process made progress for the timeout, after they dumped their stacks.

        Called as the experiment's loop polls; it never waits. The processes' progress
        counts and their answers come through the run's directory (see
        :mod:`det_estimator._heartbeat`).
        """
        if self._hang.state == HangState.HUNG or self.stopped or self.poll() is not None:
            return
        directory = Path(self._scratch.name)
        before = self._hang.state
        heartbeats = _heartbeat.read_heartbeats(directory)
        answered = _heartbeat.read_stuck(directory)
        counts = {rank: heartbeat.beats for rank, heartbeat in heartbeats.items()}
        state = self._hang.observe(counts, len(answered))
        if state == HangState.DUMPING and before == HangState.WATCHING:
            (directory / _heartbeat.DUMP_REQUEST).touch()
            self._message(
                f"trial {self.trial.id}: no process made progress for {self._hang.silent_seconds:.0f} s; "
                "their Python stacks go to the trial's log"
            )
        elif state == HangState.DUMPING and self._hang.signal_due():
            # Those that cannot answer (a thread holds the interpreter lock) dump from a signal handler.
            here = socket.gethostname()
            for rank, heartbeat in heartbeats.items():
                if rank not in answered and heartbeat.host == here:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(heartbeat.pid, _heartbeat.DUMP_SIGNAL)
        elif state == HangState.HUNG:
            error = hang_error(self._hang.silent_seconds, self.allocation.slots, _heartbeat.read_stuck(directory))
            self._lifecycle.record_error(self.info.require_trial().run_id, error)
            # The display shows it as the run's failure (its restart, or the trial's end).
            self._log.write(f"--- det-estimator: {error.message} ---\n")
            self.kill()

    def _message(self, text: str) -> None:
        if self._display is not None:
            self._display.message(text)

    def request_pause(self) -> None:
        """Asks the run to checkpoint and stop (every process watches the pause file)."""
        Path(str(self.info.pause_file)).touch()

    def stop(self) -> None:
        """Ends the run's processes at once, as a pause that cannot wait for its checkpoint (see :meth:`finish`)."""
        self.stopped = True
        self.kill()

    def finish(self) -> FinishedRun:
        """Records how the run ended (its error, from the log if no process recorded one).

        A run ended by :meth:`stop` counts as paused: the trial goes on from its latest
        checkpoint when the experiment resumes, rather than failing.
        """
        status = self._processes.wait()
        self._log.close()
        ending = Ending(exit_status=status, stopped=self.stopped)
        first_failure: Optional[tuple[int, int]] = None
        if ending.failed and not self.stopped:
            # A log that could not be written lacks this run's end, or is all of an earlier run.
            lines = _run_lines(self._store.log_text(LogOwner.trial(self.trial.id))) if self._log.intact else []
            first_failure = first_failed_process(lines)
            record_failure_from_log(self._store, self.info.require_trial().run_id, lines, status)
        # Read before the run ends: a failed run's end sets the progress back to its latest checkpoint.
        trial = self.info.require_trial()
        trained = self._store.trial(trial.trial_id).batches_trained > self._store.trial_run(trial.run_id).start_batches
        state = self._lifecycle.end(self.info, ending)
        self._scratch.cleanup()
        return FinishedRun(state, first_failure, trained)

    def kill(self) -> None:
        """Ends the run's processes at once (the launcher is going away)."""
        self._processes.kill()

    def close_log(self) -> None:
        """Writes out what the trial's log still holds, when the launcher leaves without :meth:`finish`.

        A PostgreSQL store's log is written every half second, by a thread that ends with
        the launcher: the last lines, which tell why it left, would be lost.
        """
        self._log.close()


# A run's own files (its info, its pause file) go in a directory named after its launcher's process.
_SCRATCH_PREFIX = ".det-estimator-run-"


def _scratch_directory(shared: Optional[str]) -> tempfile.TemporaryDirectory:
    """A new directory for a run's files, in ``shared`` or the local temporary directory.

    Locally, first removes those of launchers that died: killed, they could not.
    """
    if shared is None:
        host = socket.gethostname()
        for stale in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_PREFIX}*-*"):
            pid = stale.name[len(_SCRATCH_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not launcher_alive(int(pid), host):
                shutil.rmtree(stale, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", dir=shared)


def _run_header(store: ExperimentStore, info: _info.ClusterInfo) -> str:
    """The line that starts each run's output in the trial's log."""
    run = store.trial_run(info.require_trial().run_id)
    number = [r.id for r in store.trial_runs(run.trial_id)].index(run.id) + 1
    start = f"from checkpoint {info.latest_checkpoint}" if info.latest_checkpoint else "from the start"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started_at))
    return f"--- det-estimator: run {number} of trial {run.trial_id}, {started}, {start} ---\n"


def _run_lines(log: str) -> list[str]:
    """The lines the last run wrote to the trial's log (the log holds every run of the trial)."""
    lines = log.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith("--- det-estimator: run ")]
    return lines[starts[-1] + 1 :] if starts else lines


def first_failed_process(lines: list[str]) -> Optional[tuple[int, int]]:
    """``(rank, exit status)`` of the process whose failure ended a horovodrun job, from its output; None if none.

    horovodrun names it ("The first process to do so was: / Process name: 1 / Exit code: 137");
    else its first "Process 1 exit with status code -9." line counts.
    """
    for index, line in enumerate(lines):
        if "The first process to do so was" in line:
            name = re.search(r"Process name: (\d+)", "\n".join(lines[index + 1 : index + 3]))
            code = re.search(r"Exit code: (-?\d+)", "\n".join(lines[index + 1 : index + 3]))
            if name and code:
                return int(name.group(1)), int(code.group(1))
    for line in lines:
        match = _PROCESS_EXIT.search(line)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def record_failure_from_log(store: ExperimentStore, run_id: int, lines: list[str], status: int) -> None:
    """Records the first traceback of the run's output as its error, when no process recorded one itself.

    A process killed by a signal records nothing: the rank horovodrun names is the cause,
    rather than horovodrun's own traceback or what a peer recorded on losing it.

    Without a traceback, the first process horovodrun saw exit is the cause, or a
    signal that ended the run's own process (one slot, killed), rather than whatever
    line the process printed last.
    """
    lifecycle = RunLifecycle(store)
    recorded = store.trial_run(run_id).error
    first_failure = first_failed_process(lines)
    if recorded is not None:
        # A process that failed only because its peer died (a collective lost it) may
        # record that before horovodrun ends it; the peer horovodrun saw fail first,
        # killed without a word, is the cause.
        if recorded.get("consequence") and first_failure is not None and first_failure[0] != recorded.get("rank"):
            rank, status = first_failure
            lifecycle.record_error(run_id, RunError(ErrorKind.EXITED, _exit_message(status), rank=rank))
        return
    lifecycle.record_error(run_id, _error_from_output(lines, status, first_failure))


def _error_from_output(lines: list[str], status: int, first_failure: Optional[tuple[int, int]]) -> RunError:
    """The likeliest cause of a run's failure from its output, when no process recorded one (see above)."""
    block = first_traceback(lines)
    unreachable = _unreachable_hosts(lines)
    if unreachable and block and _HOROVODRUN_SSH_FAILURE in block[-1]:
        # horovodrun's traceback names no host: the hosts and what ssh said are the cause.
        return RunError(ErrorKind.UNREACHABLE, f"horovodrun could not reach {'; '.join(unreachable)}")
    if first_failure is not None and (not block or _HOROVODRUN_FAILURE in block[-1]):
        # horovodrun's own traceback only says that a process failed, and names it after
        # its exception line, which is all a traceback's message keeps.
        rank, status = first_failure
        return RunError(ErrorKind.EXITED, _exit_message(status), rank=rank)
    if block:
        return RunError(ErrorKind.OUTPUT, block[-1], traceback="\n".join(block) + "\n")
    if _signal_name(status):  # no process horovodrun named: this run's own process (one slot) was killed
        return RunError(ErrorKind.EXITED, _exit_message(status))
    # Without output, the status is all there is to say (sys.exit(4) after the training, say).
    return RunError(ErrorKind.EXITED, lines[-1] if lines else f"{_exit_message(status)}, without output")


def _unreachable_hosts(lines: list[str]) -> list[str]:
    """``h2 over ssh (ssh: connect to host h2 port 22: No route to host)`` for each host horovodrun could not reach."""
    found = []
    for index, line in enumerate(lines):
        match = _SSH_FAILED_HOST.match(line.strip())
        if match:
            said = next((following.strip() for following in lines[index + 1 :] if following.strip()), "")
            found.append(f"{match.group(1)} over ssh ({said})" if said else f"{match.group(1)} over ssh")
    return found


def _exit_message(status: int) -> str:
    """``the process exited with status 137 (killed by SIGKILL)``."""
    return f"the process exited with status {status}{_signal_name(status)}"


def _signal_name(status: int) -> str:
    """`` (killed by SIGKILL)`` for a status that says a signal ended the process, else ``""``."""
    number = -status if status < 0 else status - 128 if status > 128 else 0
    try:
        return f" (killed by {signal.Signals(number).name})" if number else ""
    except ValueError:
        return ""


def restart_cause(run: TrialRunRecord, first_failure: Optional[tuple[int, int]] = None) -> str:
    """The failing rank's error line, as a restart records it: ``rank 1: RuntimeError: ...``.

    A process killed by a signal records no error of its own, and the others then fail on
    their lost peer: when horovodrun says the first process to fail was killed
    (``first_failure``), that is the cause, not what the survivors recorded.
    """
    if first_failure is not None and _signal_name(first_failure[1]):
        rank, status = first_failure
        return f"rank {rank}: {_exit_message(status)}"
    error = run.error or {}
    message = str(error.get("message") or "").strip().splitlines()
    line = message[0] if message else ""
    if error.get("type"):
        line = f"{error['type']}: {line}" if line else str(error["type"])
    if not line:
        line = "the processes failed" if run.exit_status is None else f"the processes exited with {run.exit_status}"
    return line if error.get("rank") is None else f"rank {error['rank']}: {line}"


def device_type() -> str:
    """The kind of device this machine's slots are, as the reference keys per-device settings: cuda, rocm or cpu."""
    if shutil.which("nvidia-smi") or os.path.exists("/dev/nvidiactl"):
        return "cuda"
    if os.path.exists("/dev/kfd"):
        return "rocm"
    return "cpu"


def first_traceback(lines: list[str]) -> list[str]:
    """The first Python traceback in a job's output, down to its exception line.

    horovodrun prefixes each worker's lines with ``[rank]<stderr>:``; lines of other
    ranks interleaved with the traceback are skipped.
    """
    for index, line in enumerate(lines):
        if "Traceback (most recent call last)" not in line:
            continue
        prefix = line[: line.index("Traceback")]
        block = [line]
        for following in lines[index + 1 :]:
            if not following.startswith(prefix):
                continue
            block.append(following)
            body = following[len(prefix) :]
            if body and not body[0].isspace():  # "SomeError: message" ends a traceback
                break
        return block
    return []
