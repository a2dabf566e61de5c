"""The processes of one trial run, and the slots the experiment's trials share."""

import dataclasses
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator import _info, launcher
from det_estimator.orchestration._display import Display
from det_estimator.orchestration._runs import begin_run, end_run
from det_estimator.store import ExperimentRecord, ExperimentStore, State, TrialRecord


@dataclass(frozen=True)
class Allocation:
    """Slots given to one trial run: how many, and on which hosts (None: this machine)."""

    slots: int
    hosts: Optional[str] = None


class SlotPool:
    """The slots an experiment's trials share: a number on this machine, or ``host:slots`` entries.

    Args:
        budget: slots on this machine, when ``hosts`` is None.
        hosts: Horovod's host list (``"host1:2,host2:2"``), or None.
    """

    def __init__(self, budget: int, hosts: Optional[str] = None) -> None:
        if hosts:
            self._free = {entry.rsplit(":", 1)[0]: int(entry.rsplit(":", 1)[1]) for entry in hosts.split(",")}
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
                return Allocation(slots, f"{host}:{slots}")
        taken = []
        for host in self._free:
            share = min(self._free[host], slots - sum(count for _, count in taken))
            if share:
                self._free[host] -= share
                taken.append((host, share))
        return Allocation(slots, ",".join(f"{host}:{count}" for host, count in taken))

    def release(self, allocation: Allocation) -> None:
        """Gives back what :meth:`allocate` took."""
        if allocation.hosts is None:
            self._free[""] += allocation.slots
            return
        for entry in allocation.hosts.split(","):
            host, count = entry.rsplit(":", 1)
            self._free[host] += int(count)


class TrialProcess:
    """One run of a trial in launched processes: started, polled, paused and finished by the experiment's loop.

    Everything the processes print goes to the trial's log (after a header line naming
    the run), and to the display with ``verbose``.

    Args:
        store: the experiment store.
        experiment: the experiment.
        trial: the trial to run.
        allocation: its slots, and their hosts.
        display: where ``verbose`` output goes.
        verbose: show the processes' output.
    """

    def __init__(
        self,
        store: ExperimentStore,
        experiment: ExperimentRecord,
        trial: TrialRecord,
        allocation: Allocation,
        display: Display,
        verbose: bool,
    ) -> None:
        self.trial = trial
        self.allocation = allocation
        hosts = allocation.hosts
        self._store = store
        self._experiment = experiment
        self._display = display
        self._verbose = verbose
        # With other hosts, the run's files go beside the checkpoints, on the shared file system.
        shared = str(Path(trial.checkpoint_dir).parent) if hosts else None
        if shared is not None:
            os.makedirs(shared, exist_ok=True)
        self._scratch = tempfile.TemporaryDirectory(prefix=".det-estimator-run-", dir=shared)
        self.pause_file = Path(self._scratch.name) / "pause"

    def start(self) -> None:
        """Records the run and starts its processes."""
        experiment, hosts, slots = self._experiment, self.allocation.hosts, self.allocation.slots
        addresses = tuple(entry.rsplit(":", 1)[0] for entry in hosts.split(",")) if hosts else ("localhost",)
        info = begin_run(self._store, experiment, self.trial, str(self.pause_file), addresses)
        self.info = dataclasses.replace(info, slots=slots, search_driven=True)
        info_path = Path(self._scratch.name) / "info.json"
        self.info.write(info_path)
        command = (
            launcher.worker_command() if experiment.command is None else launcher.script_command(experiment.command)
        )
        env = dict(
            os.environ,
            **{
                _info.INFO_VARIABLE: str(info_path),
                "DET_CHIEF_IP": launcher.chief_address(hosts),
                "DET_CHIEF_PORT": str(launcher.free_port()),
                "PYTHONUNBUFFERED": "1",
            },
        )
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        log_path = Path(self.trial.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("a", encoding="utf-8")
        self._log.write(_run_header(self._store, self.info))
        self._log.flush()
        self._process = launcher.start(launcher.process_command(command, slots, hosts), env, experiment.context_dir)
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()

    def _copy_output(self) -> None:
        for line in self._process.stdout:
            self._log.write(line)
            self._log.flush()
            if self._verbose:
                self._display.echo(line)

    def poll(self) -> Optional[int]:
        """The processes' exit status once they ended, else None."""
        return self._process.poll()

    def request_pause(self) -> None:
        """Asks the run to checkpoint and stop (every process watches the pause file)."""
        self.pause_file.touch()

    def finish(self) -> State:
        """Records how the run ended (its error, from the log if no process recorded one); returns its state."""
        status = self._process.wait()
        self._pump.join(timeout=30)
        self._log.close()
        failed = status != 0
        if failed:
            _record_failure_from_log(self._store, self.info.trial.run_id, Path(self.trial.log_path))
        state = end_run(self._store, self.info, failed, status)
        self._scratch.cleanup()
        return state

    def kill(self) -> None:
        """Ends the run's processes at once (the launcher is going away)."""
        if self._process.poll() is None:
            self._process.kill()


def _run_header(store: ExperimentStore, info: _info.ClusterInfo) -> str:
    """The line that starts each run's output in the trial's log."""
    run = store.trial_run(info.trial.run_id)
    number = [r.id for r in store.trial_runs(run.trial_id)].index(run.id) + 1
    start = f"from checkpoint {info.latest_checkpoint}" if info.latest_checkpoint else "from the start"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started_at))
    return f"--- det-estimator: run {number} of trial {run.trial_id}, {started}, {start} ---\n"


def _record_failure_from_log(store: ExperimentStore, run_id: int, log_path: Path) -> None:
    """Records the first traceback of the log as the run's error, when no process recorded one itself."""
    if store.trial_run(run_id).error is not None:
        return
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    block = first_traceback(lines)
    message = block[-1] if block else (lines[-1] if lines else "the trial's processes exited without output")
    store.record_run_error(
        run_id, {"rank": None, "type": None, "message": message, "traceback": "\n".join(block) + "\n" if block else ""}
    )


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
