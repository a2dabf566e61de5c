"""A trial's whole process tree ends with it: helper processes its ranks start do not outlive the run.

Each rank of tests/recovery/helpers_script.py starts a subprocess and a multiprocessing
pool; after the launcher is SIGKILLed, after a pause, and after a failure and its
restart, none of them, nor any rank, is left (looked up in the process table).
"""

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SECONDS_TO_END = 20


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: it only waits for its parent to collect it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def recorded_pids(pids_dir: Path) -> list[int]:
    pids = []
    for path in pids_dir.glob("rank*-*.json"):
        recorded = json.loads(path.read_text())
        pids += [recorded["rank"], *recorded["helpers"]]
    return pids


def wait_until_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + SECONDS_TO_END
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture
def script_config(context, tmp_path):
    shutil.copy(HERE / "helpers_script.py", context.directory / "helpers_script.py")
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()

    def write(batches: int = 200, **data) -> Path:
        raw = {
            "name": "helpers",
            "entrypoint": "python3 helpers_script.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": batches}},
            "resources": {"slots_per_trial": 2},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
            "max_restarts": 1,
            "data": {"pids_dir": str(pids_dir), **data},
        }
        return context.write_config(raw=raw)

    return write, pids_dir


def wait_for_both_ranks(pids_dir: Path, running) -> None:
    deadline = time.monotonic() + 180
    while len(list(pids_dir.glob("rank*-1.json"))) < 2:
        if running.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the ranks did not start their helpers; output:\n{running.finish().stdout[-3000:]}")
        time.sleep(0.2)


def test_nothing_a_trial_started_outlives_its_launcher_killed_by_sigkill(det, context, script_config):
    write, pids_dir = script_config
    running = det.start("experiment", "create", write(), context.directory)
    wait_for_both_ranks(pids_dir, running)
    pids = recorded_pids(pids_dir)
    assert all(alive(pid) for pid in pids)

    os.kill(running.process.pid, signal.SIGKILL)  # the launcher alone, as the OOM killer would

    assert wait_until_gone(pids) == [], "left running after the launcher died"


@pytest.mark.slow
def test_nothing_a_trial_started_outlives_a_pause(det, context, script_config):
    write, pids_dir = script_config
    running = det.start("experiment", "create", write(), context.directory)
    wait_for_both_ranks(pids_dir, running)
    det.ok("experiment", "pause", "1")
    assert running.finish().returncode == 0
    assert wait_until_gone(recorded_pids(pids_dir)) == []


@pytest.mark.slow
def test_nothing_a_trial_started_outlives_its_failure_nor_its_restart(det, context, script_config):
    write, pids_dir = script_config
    result = det.start("experiment", "create", write(batches=12, fail_rank=1), context.directory).finish(timeout=300)
    assert "restart 1 of 1" in result.stdout and result.returncode == 0, result.stdout[-3000:]
    assert len(list(pids_dir.glob("rank*-*.json"))) == 4  # two runs of two ranks
    assert wait_until_gone(recorded_pids(pids_dir)) == []
