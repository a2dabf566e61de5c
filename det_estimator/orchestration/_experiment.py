"""Recording an experiment, running its trial in launched processes or in this one, and following it."""

import contextlib
import dataclasses
import os
import shlex
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional, TextIO

from det_estimator import _info, launcher
from det_estimator.config import ExperimentConfig
from det_estimator.errors import error_record
from det_estimator.orchestration._display import Display
from det_estimator.orchestration._follow import StoreFollower
from det_estimator.orchestration._runs import begin_run, checkpoint_storage_root, end_run
from det_estimator.store import ExperimentRecord, ExperimentStore, State, TrialRecord

# How often the launcher looks at the store for progress and pause requests.
_POLL_SECONDS = 0.25


def record_experiment(
    store: ExperimentStore,
    config: ExperimentConfig,
    context_dir: str,
    *,
    name: Optional[str] = None,
    test: bool = False,
    hosts: Optional[str] = None,
    command: Optional[list[str]] = None,
    trial_class: Optional[_info.TrialClassSpec] = None,
    run_key: Optional[str] = None,
) -> int:
    """Records a new experiment and its trial; returns the experiment's id.

    Args:
        store: the experiment store.
        config: the validated config.
        context_dir: the directory the trial runs in (absolute).
        name: the experiment's name (default: the config's).
        test: one batch, one validation step and one checkpoint.
        hosts: the machines it runs on (``"host1:2,host2:2"``); None for this one.
        command: the command every slot runs, for a script given outside the config
            (``det.init(local=False)``); a config whose entrypoint is a command gives its own.
        trial_class: the trial class, when it is not the config's entrypoint.
        run_key: the key under which a later run with the same key resumes it.
    """
    if config.is_script and command is None:
        command = list(config.entrypoint_command)
    if command is not None:
        entrypoint = shlex.join(command)
    elif trial_class is not None:
        entrypoint = f"{trial_class.module}:{trial_class.qualname}"
    else:
        entrypoint = config.entrypoint
    experiment_id = store.create_experiment(
        name=name or config.name or "experiment",
        config=config.to_dict(),
        context_dir=context_dir,
        entrypoint=entrypoint,
        slots=config.resources.slots_per_trial,
        test=test,
        command=command,
        hosts=hosts,
        run_key=run_key,
        trial_class=None if trial_class is None else dataclasses.asdict(trial_class),
    )
    seed = config.reproducibility.experiment_seed
    store.create_trial(
        experiment_id, config.sample_hyperparameters(seed), seed, checkpoint_storage_root(config, context_dir)
    )
    return experiment_id


def find_or_record_experiment(
    store: ExperimentStore, run_key: str, config: ExperimentConfig, context_dir: str, test: bool, **kwargs
) -> int:
    """The experiment recorded under ``run_key``, updated to ``config``, or a new one.

    A run found again keeps its seed, so its trial keeps its hyperparameters; its length
    and slots come from the new config.
    """
    existing = store.find_experiment(run_key)
    if existing is None:
        return record_experiment(store, config, context_dir, test=test, run_key=run_key, **kwargs)
    raw = config.to_dict()
    raw["reproducibility"] = existing.config["reproducibility"]
    store.update_experiment(existing.id, raw, config.resources.slots_per_trial, test)
    return existing.id


def run_experiment(store: ExperimentStore, experiment_id: int, display: Display, verbose: bool = False) -> State:
    """Runs an experiment's trial in launched processes to its end or to a pause; returns its state.

    Progress is read from the store and shown on ``display``; everything the processes
    print goes to the trial's log (and to ``display`` with ``verbose``). SIGINT and
    SIGTERM to this process, and ``experiment pause`` from anywhere, make the trial
    checkpoint and stop.

    Raises:
        ExperimentBusyError: another live process already runs the experiment.
    """
    store.claim(experiment_id)
    store.set_state(experiment_id, State.ACTIVE)
    experiment = store.experiment(experiment_id)
    state = State.ERROR
    try:
        for trial in store.trials(experiment_id):
            state = _run_launched(store, experiment, trial, display, verbose)
    finally:
        store.set_state(experiment_id, state)
    return state


def _run_launched(
    store: ExperimentStore, experiment: ExperimentRecord, trial: TrialRecord, display: Display, verbose: bool
) -> State:
    hosts = experiment.hosts
    # With other hosts, the run's files go beside the checkpoints, on the shared file system.
    shared = str(Path(trial.checkpoint_dir).parent) if hosts else None
    with _launch_directory(shared) as scratch:
        pause_file = scratch / "pause"
        addresses = tuple(entry.rsplit(":", 1)[0] for entry in hosts.split(",")) if hosts else ("localhost",)
        info = begin_run(store, experiment, trial, str(pause_file), addresses)
        info_path = scratch / "info.json"
        info.write(info_path)
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
        log_path = Path(trial.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        follower = StoreFollower(store, experiment.id, since=store.trial_run(info.trial.run_id).started_at)
        process = launcher.start(
            launcher.process_command(command, experiment.slots, hosts), env, experiment.context_dir
        )
        with log_path.open("a", encoding="utf-8") as log:
            log.write(_run_header(store, info))
            log.flush()
            pump = threading.Thread(target=_pump, args=(process.stdout, log, display if verbose else None), daemon=True)
            pump.start()
            _follow_until_exit(store, experiment.id, process, follower, display, pause_file)
            pump.join(timeout=30)
        failed = process.returncode != 0
        if failed:
            _record_failure_from_log(store, info.trial.run_id, log_path)
        state = end_run(store, info, failed, process.returncode)
        for event in follower.poll():
            display.show(event)
        return state


def _follow_until_exit(
    store: ExperimentStore,
    experiment_id: int,
    process,
    follower: StoreFollower,
    display: Display,
    pause_file: Path,
) -> None:
    """Shows the run's events until its processes exit; turns pause requests into the pause file."""

    def request_pause() -> None:
        if not pause_file.exists():
            pause_file.touch()
            display.message("Pausing: the trial finishes its batch and writes a checkpoint...")

    with launcher.pause_on_signals(request_pause):
        while process.poll() is None:
            for event in follower.poll():
                display.show(event)
            if store.experiment(experiment_id).pause_requested_at is not None:
                request_pause()
            time.sleep(_POLL_SECONDS)
        process.wait()


def _run_header(store: ExperimentStore, info: _info.ClusterInfo) -> str:
    """The line that starts each run's output in the trial's log."""
    run = store.trial_run(info.trial.run_id)
    number = [r.id for r in store.trial_runs(run.trial_id)].index(run.id) + 1
    start = f"from checkpoint {info.latest_checkpoint}" if info.latest_checkpoint else "from the start"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started_at))
    return f"--- det-estimator: run {number} of trial {run.trial_id}, {started}, {start} ---\n"


def _pump(lines: TextIO, log: TextIO, display: Optional[Display]) -> None:
    """Copies the processes' output into the trial's log, and to the display when verbose."""
    for line in lines:
        log.write(line)
        log.flush()
        if display is not None:
            display.echo(line)


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


@contextlib.contextmanager
def _launch_directory(shared_parent: Optional[str] = None) -> Iterator[Path]:
    """A scratch directory for a run's info and pause files, removed afterwards (on the shared file system if given)."""
    if shared_parent is not None:
        os.makedirs(shared_parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".det-estimator-run-", dir=shared_parent) as scratch:
        yield Path(scratch)


@contextlib.contextmanager
def in_process_run(store: ExperimentStore, experiment_id: int, display: Display) -> Iterator[_info.ClusterInfo]:
    """Runs an experiment's trial in this very process: yields its info, records its end.

    For ``run_trial`` on one slot and ``det.init(local=True)``: the caller runs the
    trial inside the ``with`` block. A thread follows the store and shows the events on
    ``display`` meanwhile. An exception from the block is recorded as the run's error
    and raised again.
    """
    store.claim(experiment_id)
    store.set_state(experiment_id, State.ACTIVE)
    experiment = store.experiment(experiment_id)
    trial = store.trials(experiment_id)[0]
    info = begin_run(store, experiment, trial)
    since = store.trial_run(info.trial.run_id).started_at
    stop = threading.Event()
    shown = threading.Thread(target=_follow_in_thread, args=(store.path, experiment_id, since, display, stop))
    shown.daemon = True
    _info.set_in_process(info)
    failed = True
    shown.start()
    try:
        yield info
        failed = False
    except BaseException as error:
        store.record_run_error(info.trial.run_id, error_record(error, 0))
        raise
    finally:
        _info.set_in_process(None)
        state = end_run(store, info, failed)
        store.set_state(experiment_id, state)
        stop.set()
        shown.join(timeout=30)


def _follow_in_thread(store_path: Path, experiment_id: int, since: float, display: Display, stop: threading.Event):
    with ExperimentStore(store_path) as store:
        follower = StoreFollower(store, experiment_id, since)
        while True:
            stopping = stop.wait(_POLL_SECONDS)
            for event in follower.poll():
                display.show(event)
            if stopping:
                return
