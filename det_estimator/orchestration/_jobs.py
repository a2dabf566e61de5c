"""Jobs: a script run on N slots outside any experiment (batch inference), recorded in the store with its log.

``det-estimator job run CONFIG CONTEXT_DIR`` reads a job config::

    entrypoint_script: python3 batch_inference.py    # or entrypoint: python3 ...
    data:                                            # anything; the script's context.config_data
      trial_id: 1
      batch_size: 64
    resources:
      slots: 2                                       # or slots_per_trial; --slots wins
    environment:                                     # optional, as in an experiment config
      environment_variables: [OMP_NUM_THREADS=1]

and runs the command on each slot (under horovodrun on several), in the context
directory, with ``DET_CLUSTER_INFO`` naming a :class:`~det_estimator.ClusterInfo` of
task type ``BATCH_INFERENCE``: ``det.keras.init()`` there gives a context without
``training``, whose ``config_data`` is ``data``. Imports no TensorFlow.
"""

import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TextIO

from det_estimator import _info, launcher
from det_estimator.config import ConfigError, EnvironmentConfig, load_environment
from det_estimator.config._errors import PREFIX
from det_estimator.config._json_values import freeze_mapping, thaw
from det_estimator.errors import DetEstimatorError
from det_estimator.lifecycle import Ending, ErrorKind, RunError, RunLifecycle, cause_among_processes
from det_estimator.orchestration._processes import device_type, first_traceback, start_processes
from det_estimator.store import ExperimentStore, JobRecord, LogOwner, LogWriter

_KEYS = ("entrypoint", "entrypoint_script", "name", "description", "labels", "data", "resources", "environment")
_RESOURCE_KEYS = ("slots", "slots_per_trial")


class JobConfigError(DetEstimatorError, ValueError):
    """A job config that cannot be run; the message names the key."""


@dataclass(frozen=True)
class JobSpec:
    """A validated job config.

    Attributes:
        name: the job's name (the config's ``name``, else the config file's stem).
        command: the command each slot runs, as words.
        data: the config's ``data`` section, the script's ``context.config_data``.
        slots: the processes to run (``resources.slots``, else ``slots_per_trial``, else 1).
        config: the config as given.
        environment: the variables set in every process (``environment.environment_variables``).
    """

    name: str
    command: tuple[str, ...]
    data: dict[str, Any]
    slots: int
    config: dict[str, Any]
    environment: EnvironmentConfig


def load_job_config(raw: Any, default_name: str = "job", slots: Optional[int] = None) -> JobSpec:
    """Validates a job config (the parsed YAML).

    Args:
        raw: the parsed config.
        default_name: the name when the config gives none.
        slots: the processes to run, overriding the config's.

    Raises:
        JobConfigError: not a mapping, an unknown key, no command, no ``data`` mapping, or a bad slot count.
        ConfigError: a bad ``environment`` section.
    """
    if not isinstance(raw, Mapping):
        raise JobConfigError(f"A job config must be a mapping of keys. Received: {type(raw).__name__}")
    unknown = sorted(str(key) for key in raw if key not in _KEYS)
    if unknown:
        raise JobConfigError(f"Unknown key {unknown[0]!r} in the job config; a job config has {', '.join(_KEYS)}.")
    command = _command(raw)
    data = raw.get("data")
    if not isinstance(data, Mapping):
        received = "nothing" if data is None else type(data).__name__
        raise JobConfigError(
            "A job config needs a `data` mapping: the job's settings, which the script reads as "
            f"context.config_data (e.g. data: {{trial_id: 1, batch_size: 64}}). Received: {received}"
        )
    resources = raw.get("resources") or {}
    if not isinstance(resources, Mapping) or any(key not in _RESOURCE_KEYS for key in resources):
        raise JobConfigError(
            f"`resources` of a job config takes {' or '.join(_RESOURCE_KEYS)}. Received: {resources!r}"
        )
    configured = resources.get("slots", resources.get("slots_per_trial", 1))
    if isinstance(configured, bool) or not isinstance(configured, int) or configured < 1:
        raise JobConfigError(f"`resources.slots` must be a positive integer. Received: {configured!r}")
    name = raw.get("name") or default_name
    if not isinstance(name, str):
        raise JobConfigError(f"`name` of a job config must be a string. Received: {name!r}")
    # What the store cannot hold as JSON (a date, a set) is refused now, naming its key.
    try:
        data = thaw(freeze_mapping(data, "data"))
    except ConfigError as error:
        raise JobConfigError("job config: " + str(error).removeprefix(PREFIX)) from None
    environment = load_environment(raw.get("environment"))
    return JobSpec(name, command, data, slots or configured, dict(raw), environment)


def _command(raw: Mapping) -> tuple[str, ...]:
    if "entrypoint" in raw and "entrypoint_script" in raw:
        raise JobConfigError("Give either `entrypoint` or `entrypoint_script` in a job config, not both.")
    key = "entrypoint_script" if "entrypoint_script" in raw else "entrypoint"
    value = raw.get(key)
    if isinstance(value, str):
        try:
            words = tuple(shlex.split(value))
        except ValueError as error:  # an unbalanced quote
            raise JobConfigError(
                f"The job config's {key} {value!r} cannot be split into words: {error}. Expected a command as a "
                "shell would read it, e.g. `entrypoint_script: python3 batch_inference.py`."
            ) from None
    elif isinstance(value, (list, tuple)) and all(isinstance(word, str) for word in value):
        words = tuple(value)
    else:
        words = ()
    if any("\0" in word for word in words):
        raise JobConfigError(f"The job config's {key} {value!r} has a NUL character, which no command line can hold.")
    if not words or (len(words) == 1 and ":" in words[0] and not words[0].endswith(".py")):
        raise JobConfigError(
            f"A job config needs the command to run: `entrypoint_script: python3 batch_inference.py`. "
            f"Received: {key}={value!r}"
        )
    return words


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended: its record (state, exit status, error, log)."""

    job: JobRecord


def run_job(
    store: ExperimentStore,
    spec: JobSpec,
    context_dir: str,
    stream: Optional[TextIO] = None,
    verbose: bool = False,
) -> JobOutcome:
    """Records the job, runs its processes to the end, and records how it ended.

    Everything the processes print goes to the job's log; with ``verbose`` also to
    ``stream``. Ctrl-C (or SIGTERM) ends the processes and records the job as failed.

    Args:
        store: the store to record the job in.
        spec: the validated config.
        context_dir: the directory the command runs in.
        stream: where ``verbose`` output goes.
        verbose: show the processes' output as it comes.

    Returns:
        The outcome, with the job's final record.
    """
    lifecycle = RunLifecycle(store)
    job_id, info = lifecycle.begin_job(spec.name, spec.config, context_dir, list(spec.command), spec.slots, spec.data)
    said = stream or sys.stderr
    log = store.log_writer(LogOwner.job(job_id), lambda message: print(message, file=said, flush=True))
    with tempfile.TemporaryDirectory(prefix=".det-estimator-job-") as scratch:
        try:
            status, interrupted = _run_processes(
                info, spec, context_dir, Path(scratch), log, job_id, stream if verbose else None
            )
        finally:
            log.close()
        error: Optional[RunError] = None
        if status or interrupted:
            output = store.log_text(LogOwner.job(job_id)) if log.intact else ""
            error = _error_of(output, status, interrupted, Path(scratch))
    lifecycle.end_job(job_id, Ending(exit_status=status, stopped=interrupted), error)
    return JobOutcome(store.job(job_id))


def _run_processes(
    info: _info.ClusterInfo,
    spec: JobSpec,
    cwd: str,
    scratch: Path,
    log: LogWriter,
    job_id: int,
    echo: Optional[TextIO],
) -> tuple[int, bool]:
    """Runs the job's processes, copying their output to the log; returns (exit status, interrupted)."""
    interrupted = threading.Event()
    command = launcher.script_command(list(spec.command))
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    shown = launcher.describe(launcher.process_command(command, spec.slots, None))
    log.write(f"--- det-estimator: job {job_id}, {started}: {shown} ---\n")

    def copy(line: str) -> None:
        log.write(line)
        if echo is not None:
            echo.write(line)
            echo.flush()

    environment = spec.environment.variables_for(device_type())
    processes = start_processes(info, command, cwd, scratch, copy, environment=environment)

    def stop() -> None:
        interrupted.set()
        processes.terminate()

    with launcher.pause_on_signals(stop):
        status = processes.wait()
    return status, interrupted.is_set()


def _error_of(output: str, status: Optional[int], interrupted: bool, scratch: Path) -> RunError:
    """The job's error: the root cause a process recorded, as an experiment's; else the first traceback of its log.

    A process that failed inside ``det.keras.init()``'s context recorded the root cause
    of its error, with the user's own frames (see
    :func:`~det_estimator.lifecycle.write_process_error`); one that failed before it, or
    was killed, did not: its output tells.
    """
    if interrupted:
        return RunError(ErrorKind.INTERRUPTED, "the job was interrupted (Ctrl-C or SIGTERM)")
    recorded = cause_among_processes(scratch)
    if recorded is not None:
        return recorded
    lines = output.splitlines()
    block = first_traceback(lines)
    if block:
        return RunError(ErrorKind.OUTPUT, block[-1], traceback="\n".join(block) + "\n")
    message = lines[-1] if len(lines) > 1 else f"the job's processes exited with status {status} without output"
    return RunError(ErrorKind.EXITED, message)
