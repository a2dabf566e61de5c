"""Runs the ``det-estimator`` console script end to end on the analytic trial (tests/support/)."""

import contextlib
import io
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

SUPPORT = Path(__file__).parents[1] / "support"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
# Every call gets a timeout, so that a hang fails its test fast.
TIMEOUT_SECONDS = 180
LEARNING_RATE, GLOBAL_BATCH = 0.01, 8


class Context:
    """A CONTEXT_DIR holding the analytic trial, and the experiment configs written into it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(SUPPORT / "analytic_trial.py", directory / "analytic_trial.py")
        shutil.copy(SUPPORT / "analytic_closed_form.py", directory / "analytic_closed_form.py")

    def config(self, max_batches: int = 20, hparams: Optional[dict] = None, **overrides: Any) -> dict[str, Any]:
        """The config, as a dict: relative paths resolve against the context dir."""
        config = {
            "name": "analytic",
            "entrypoint": "analytic_trial:AnalyticTrial",
            "hyperparameters": {
                "global_batch_size": GLOBAL_BATCH,
                "learning_rate": LEARNING_RATE,
                "events_dir": "events",
                **(hparams or {}),
            },
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": max_batches}},
            "scheduling_unit": 5,
            "min_validation_period": {"batches": 5},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": "checkpoints",
                "save_trial_latest": 1,
                "save_trial_best": 1,
            },
            "reproducibility": {"experiment_seed": 1},
            # A failure ends the run at once; tests of automatic restarts set their own.
            "max_restarts": 0,
        }
        config.update(overrides)
        return config

    def write_config(self, *args: Any, filename: str = "config.yaml", **kwargs: Any) -> Path:
        """Writes :meth:`config` (or ``raw``, a dict given as ``raw=...``) as YAML; returns its path."""
        raw = kwargs.pop("raw", None)
        config = raw if raw is not None else self.config(*args, **kwargs)
        path = self.directory / filename
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return path


class Running:
    """A ``det-estimator`` started in a session of its own, its stdout read line by line by a thread."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: list[str] = []
        self._stderr: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=lambda: self._stderr.append(process.stderr.read()), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = TIMEOUT_SECONDS) -> str:
        """Reads stdout until a line contains ``needle``; returns that line."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                self.kill()
                pytest.fail(f"{needle!r} never appeared within {timeout} s; output:\n{self.output[-5000:]}")
            if line is None:
                self.process.wait(timeout=30)
                pytest.fail(f"the command ended before {needle!r} appeared; output:\n{self.output[-5000:]}")
            self.lines.append(line)
            if needle in line:
                return line

    def finish(self, timeout: float = TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
        """Waits for the command; kills its session and fails the test past ``timeout``."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the command did not finish within {timeout} s; output:\n{self.output[-5000:]}")
        for reader in self._readers:
            reader.join(timeout=30)
        while not self._queue.empty():
            line = self._queue.get_nowait()
            if line is not None:
                self.lines.append(line)
        stderr = "".join(self._stderr)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, self.output, stderr)

    def kill(self) -> None:
        """SIGKILLs the command's whole session (its runner child too), if any of it still runs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


class Det:
    """``det-estimator --store STORE ...`` as a subprocess, with a timeout on every call."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.started: list[Running] = []

    @staticmethod
    def env() -> dict[str, str]:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("DET_ESTIMATOR_STORE", None)  # --store alone names the store
        return env

    def command(self, args: tuple) -> list[str]:
        return [COMMAND, "--store", str(self.store), *map(str, args)]

    def __call__(self, *args: Any, timeout: float = TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self.command(args), capture_output=True, text=True, env=self.env(), timeout=timeout)
        except subprocess.TimeoutExpired as error:
            pytest.fail(f"det-estimator {' '.join(map(str, args))} did not finish within {timeout} s: {error}")

    def here(self, *args: Any) -> subprocess.CompletedProcess:
        """Runs the command in this process, as :meth:`__call__` runs it in its own.

        For what the command says about its input, which no process boundary changes:
        the console script itself is what the other calls run. An exception the command
        lets through fails the test, as a traceback would.
        """
        from det_estimator.cli import main

        argv = ["--store", str(self.store), *map(str, args)]
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(argv)
            except SystemExit as exit_:  # argparse's way of refusing a command line
                status = exit_.code if isinstance(exit_.code, int) else 2
        return subprocess.CompletedProcess([COMMAND, *argv], status, stdout.getvalue(), stderr.getvalue())

    def ok(self, *args: Any, timeout: float = TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
        """Runs a command that must succeed."""
        return self._succeeded(args, self(*args, timeout=timeout))

    def json(self, *args: Any) -> Any:
        """Runs the reading command ``COMMAND ... --json`` in this process (see :meth:`here`) and parses its stdout.

        What a reading command prints depends on the store alone, and a process of its own
        for each would cost the tests a start-up per call (tests read often); the
        commands' process boundary is under test wherever :meth:`ok` runs them.
        """
        return json.loads(self._succeeded((*args, "--json"), self.here(*args, "--json")).stdout)

    @staticmethod
    def _succeeded(args: tuple, result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
        """``result``, once asserted to be a success (the failure shows the command's output)."""
        assert result.returncode == 0, (
            f"det-estimator {' '.join(map(str, args))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-5000:]}\nstderr:\n{result.stderr[-5000:]}"
        )
        return result

    def start(self, *args: Any) -> Running:
        """Starts a command in a new session (so that its process group can be signalled)."""
        process = subprocess.Popen(
            self.command(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            start_new_session=True,
        )
        self.started.append(Running(process))
        return self.started[-1]

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        """The experiment as ``experiment list --json`` shows it."""
        (experiment,) = [e for e in self.json("experiment", "list") if e["id"] == experiment_id]
        return experiment


@pytest.fixture(scope="session")
def make_det():
    """``Det(store_path)``, for fixtures of a wider scope than a test."""
    return Det


@pytest.fixture(scope="session")
def make_context():
    """``Context(directory)``, for fixtures of a wider scope than a test."""
    return Context


@pytest.fixture
def det(tmp_path):
    """The command on a store of the test's own; what a failed test left running is killed."""
    command = Det(tmp_path / "store.sqlite")
    yield command
    for running in command.started:
        running.kill()


@pytest.fixture
def context(tmp_path) -> Context:
    """A context dir with the analytic trial in it."""
    return Context(tmp_path / "context")
