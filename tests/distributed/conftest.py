"""Runs real multi-process jobs under ``horovodrun --gloo`` on localhost.

Every launch has a timeout and kills the whole process group when it expires, so a hang
in a collective fails the test in minutes instead of stalling the suite.
"""

import functools
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

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


@pytest.fixture
def horovod_job(runs) -> Callable[..., subprocess.CompletedProcess]:
    """The :func:`run_under_horovod` launcher, as a fixture."""
    return functools.partial(run_under_horovod, runs.communicate_or_kill)


@pytest.fixture(scope="session")
def load_worker(module_loader) -> Callable[[str], object]:
    """Imports a worker script as a module, so a test shares its data generators."""
    return lambda worker: module_loader(WORKERS_DIR / worker)
