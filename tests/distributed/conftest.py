"""Runs real multi-process jobs under ``horovodrun --gloo`` on localhost.

A worker script on two ranks runs in a pool of two Horovod ranks started once (see
:class:`TwoRankPool`); on one process it runs as plain ``python``. Every run has a
timeout and kills the whole process group when it expires, so a hang in a collective
fails the test in minutes instead of stalling the suite.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Optional

import pytest

from det_estimator.launcher import free_port

WORKERS_DIR = Path(__file__).parent / "workers"
DEFAULT_TIMEOUT_SECONDS = 180


def _horovodrun() -> str:
    launcher = Path(sys.executable).parent / "horovodrun"
    if not launcher.exists():
        pytest.fail(f"horovodrun not found next to {sys.executable}; run scripts/setup.sh first")
    return str(launcher)


def run_under_horovod(
    communicate_or_kill: Callable[[subprocess.Popen, float, str], str],
    worker: str,
    args: Sequence[str] = (),
    num_processes: int = 2,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> subprocess.CompletedProcess:
    """Runs ``tests/distributed/workers/<worker>`` on ``num_processes`` Gloo ranks.

    One process runs as plain ``python``, without horovodrun, as a user's single-process
    run would.

    Returns the completed process (stdout and stderr merged into ``stdout``); fails the
    test with the job's output if the job is still running after ``timeout`` seconds.
    """
    command: list[str] = [sys.executable, str(WORKERS_DIR / worker), *args]
    if num_processes > 1:
        command = [_horovodrun(), "-np", str(num_processes), "-H", f"localhost:{num_processes}", "--gloo", *command]
    # The chief of the job's DistributedContext listens on a port free now, as det-estimator's launcher sets it.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", DET_CHIEF_PORT=str(free_port()))
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    output = communicate_or_kill(process, timeout, worker)
    return subprocess.CompletedProcess(command, process.returncode, output, None)


class TwoRankPool:
    """Two Horovod ranks (``workers/pool.py`` under ``horovodrun -np 2 --gloo``) that run worker scripts in turn.

    Started at its first :meth:`run`, and again after a run that failed to finish: a
    script that hangs a rank, or kills one, costs the pool, not the next test.

    Args:
        directory: where the pool's tasks, outputs and log go.
    """

    RANKS = 2

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._starts = 0
        self._process: Optional[subprocess.Popen] = None
        self._tasks = Path()
        self._next = 0

    def _start(self) -> None:
        self._starts += 1
        self._tasks = self._directory / f"pool-{self._starts}"
        self._tasks.mkdir(parents=True)
        command = [_horovodrun(), "-np", str(self.RANKS), "-H", f"localhost:{self.RANKS}", "--gloo"]
        command += [sys.executable, str(WORKERS_DIR / "pool.py"), str(self._tasks)]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        with open(self._tasks / "pool.log", "w") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self._next = 0

    def run(self, worker: str, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
        """Runs ``workers/<worker>`` on both ranks as :func:`run_under_horovod` would; fails past ``timeout``."""
        if self._process is None or self._process.poll() is not None:
            self._start()
        number, self._next = self._next, self._next + 1
        # The chief of the script's DistributedContext listens on a port free now, as det-estimator's launcher sets it.
        task = {"script": str(WORKERS_DIR / worker), "args": list(args), "env": {"DET_CHIEF_PORT": str(free_port())}}
        staged = self._tasks / f"task-{number}.tmp"
        staged.write_text(json.dumps(task))
        staged.rename(self._tasks / f"task-{number}.json")
        statuses = self._wait(number, time.monotonic() + timeout)
        outputs = []
        for rank in range(self.RANKS):
            path = self._tasks / f"output-{number}-rank{rank}.txt"
            outputs.append(f"--- rank {rank} ---\n" + (path.read_text(errors="replace") if path.exists() else ""))
        output = "".join(outputs)
        if len(statuses) < self.RANKS:
            died = self._process.poll() is not None
            self.close()
            log = (self._tasks / "pool.log").read_text(errors="replace")
            if not died:
                pytest.fail(f"{worker} did not finish within {timeout} s on both ranks; output:\n{output[-5000:]}")
            return subprocess.CompletedProcess(task["script"], 1, f"{output}\n--- the pool ---\n{log[-5000:]}", None)
        status = next((status for status in statuses.values() if status != 0), 0)
        return subprocess.CompletedProcess(task["script"], status, output, None)

    def _wait(self, number: int, deadline: float) -> dict[int, int]:
        """The exit status of task ``number`` on each rank that finished it before ``deadline`` or the pool's end."""
        statuses: dict[int, int] = {}
        while len(statuses) < self.RANKS and time.monotonic() < deadline and self._process.poll() is None:
            for rank in range(self.RANKS):
                done = self._tasks / f"done-{number}-rank{rank}.json"
                if rank not in statuses and done.exists():
                    statuses[rank] = json.loads(done.read_text())["status"]
            time.sleep(0.05)
        return statuses

    def close(self) -> None:
        """Asks the ranks to stop; kills what is left of the pool after a few seconds."""
        if self._process is None:
            return
        if self._process.poll() is None:
            staged = self._tasks / "stop.tmp"
            staged.write_text(json.dumps({"stop": True}))
            staged.rename(self._tasks / f"task-{self._next}.json")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None


@pytest.fixture(scope="session")
def two_rank_pool(tmp_path_factory):
    """The :class:`TwoRankPool` of this test process (modules using it share an xdist group, so one process)."""
    pool = TwoRankPool(tmp_path_factory.mktemp("two-rank-pool"))
    yield pool
    pool.close()


def pytest_runtest_teardown(item, nextitem):
    """Ends the pool after the last of a run of tests that use it: idle, its Horovod ranks still take CPU.

    Its tests share an xdist group, so they run one after the other; a later one starts it again.
    """
    if "two_rank_pool" in item.fixturenames and (nextitem is None or "two_rank_pool" not in nextitem.fixturenames):
        pool = item.funcargs.get("two_rank_pool")
        if pool is not None:
            pool.close()


@pytest.fixture
def horovod_job(runs, two_rank_pool) -> Callable[..., subprocess.CompletedProcess]:
    """Runs a worker script as :func:`run_under_horovod` does: two ranks in the pool, one as plain ``python``."""

    def run(
        worker: str, args: Sequence[str] = (), num_processes: int = 2, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> subprocess.CompletedProcess:
        if num_processes == TwoRankPool.RANKS:
            return two_rank_pool.run(worker, args, timeout)
        return run_under_horovod(runs.communicate_or_kill, worker, args, num_processes, timeout)

    return run


@pytest.fixture(scope="session")
def load_worker(module_loader) -> Callable[[str], object]:
    """Imports a worker script as a module, so a test shares its data generators."""
    return lambda worker: module_loader(WORKERS_DIR / worker)
