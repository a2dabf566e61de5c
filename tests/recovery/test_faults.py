"""Fault injection with real processes: a rank killed mid-evaluation or mid-checkpoint, a full
checkpoint file system, a locked or corrupted store. Every call has a timeout, so a hang fails."""

import contextlib
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.store import ExperimentStore

# A killed job must end well within this; past it, the test fails as a hang.
HANG_SECONDS = 120


def trial_of(det, experiment_id: int) -> dict:
    (trial,) = det.json("experiment", "describe", experiment_id)["trials"]
    return trial


def assert_checkpoints_sound(det, experiment_id: int, checkpoint_dir: str) -> None:
    """Every checkpoint the store lists is sealed and intact; nothing partial is listed; the latest is valid."""
    listed = [c for c in det.json("checkpoint", "list", experiment_id) if c["state"] == "COMPLETED"]
    assert listed, "no checkpoint survived"
    on_disk = TrialCheckpoints(checkpoint_dir)
    sealed = {checkpoint.uuid: checkpoint for checkpoint in on_disk.list()}
    for checkpoint in listed:
        assert checkpoint["uuid"] in sealed, checkpoint
        assert not Path(checkpoint["path"]).name.startswith(".")
        assert sealed[checkpoint["uuid"]].verify() == []
    latest = max(listed, key=lambda c: c["batches"])
    assert on_disk.latest_valid().uuid == latest["uuid"]


def resume_to_the_closed_form(det, experiment_id, analytic, cli, helpers, max_batches):
    det.ok("experiment", "resume", experiment_id, timeout=HANG_SECONDS + 120)
    described = det.json("experiment", "describe", experiment_id)
    assert described["state"] == "COMPLETED"
    (trial,) = described["trials"]
    last = trial["validations"][-1]
    assert last["batches"] == max_batches
    assert last["metrics"]["weight"] == pytest.approx(helpers.closed_form_weight(analytic, cli, max_batches), rel=1e-5)
    return trial


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"kind": "kill_in_evaluation", "rank": 1, "evaluation": 2}, id="rank-1-killed-in-evaluation"),
        pytest.param({"kind": "kill_in_checkpoint", "rank": 0, "checkpoint": 2}, id="chief-killed-mid-checkpoint"),
    ],
)
def test_a_rank_killed_ends_the_job_and_the_experiment_resumes_to_the_closed_form(
    det, context, helpers, analytic, cli, tmp_path, fault
):
    marker = tmp_path / "struck"
    fault = {**fault, "once": str(marker)}
    config = context.write_config(raw=helpers.fault_config(context, 20, fault, max_restarts=0, slots=2))
    result = det("experiment", "create", config, context.directory, timeout=HANG_SECONDS + 120)
    assert marker.exists(), result.stdout + result.stderr
    assert result.returncode == 1, result.stdout + result.stderr
    # The half-written checkpoint is on disk, hidden, until `experiment list` sweeps what
    # killed writes left in experiments that no longer run.
    half_written = list(context.directory.rglob(".partial-*"))
    assert bool(half_written) == (fault["kind"] == "kill_in_checkpoint"), half_written
    (experiment,) = det.json("experiment", "list")
    assert not any(path.exists() for path in half_written)
    trial = trial_of(det, experiment["id"])
    assert trial["state"] == "ERROR"
    assert trial["runs"][-1]["error"] is not None
    assert_checkpoints_sound(det, experiment["id"], trial["checkpoint_dir"])
    resumed = resume_to_the_closed_form(det, experiment["id"], analytic, cli, helpers, 20)
    assert resumed["runs"][-1]["start_batches"] > 0
    assert not any(entry.name.startswith(".partial-") for entry in Path(trial["checkpoint_dir"]).iterdir())
    assert_checkpoints_sound(det, experiment["id"], trial["checkpoint_dir"])


@pytest.mark.slow
def test_a_rank_killed_in_training_is_survived_by_an_automatic_restart(det, context, helpers, analytic, cli, tmp_path):
    marker = tmp_path / "struck"
    fault = {"kind": "kill_in_training", "rank": 1, "batch": 12, "once": str(marker)}
    config = context.write_config(raw=helpers.fault_config(context, 20, fault, max_restarts=5, slots=2))
    result = det.ok("experiment", "create", config, context.directory, timeout=HANG_SECONDS + 180)
    assert marker.exists()
    (experiment,) = det.json("experiment", "list")
    described = det.json("experiment", "describe", experiment["id"])
    (trial,) = described["trials"]
    assert described["state"] == "COMPLETED" and trial["restarts"] == 1, result.stdout
    (restart,) = trial["restart_causes"]
    # The killed rank is the cause, not the error its peer recorded when the connection broke.
    assert restart["cause"].startswith("rank 1: ") and "killed by SIGKILL" in restart["cause"], restart
    last = trial["validations"][-1]
    assert last["metrics"]["weight"] == pytest.approx(helpers.closed_form_weight(analytic, cli, 20), rel=1e-5)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path) -> None:
    """Fills the file system of ``directory`` to its last byte."""
    descriptor = os.open(directory / "filler.bin", os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\0" * chunk)
    finally:
        os.close(descriptor)


def test_a_full_checkpoint_file_system_fails_clearly_and_keeps_the_previous_checkpoint(det, context, helpers, tmp_path):
    with small_tmpfs(tmp_path / "small-fs", "8m") as storage:
        raw = helpers.fault_config(context, 40, None, max_restarts=0)
        raw["hyperparameters"]["seconds_per_batch"] = 0.2
        raw["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(storage), "save_trial_latest": 5}
        raw["checkpoint_policy"] = "all"
        config = context.write_config(raw=raw)
        running = det.start("experiment", "create", config, context.directory)
        running.wait_for("checkpoint ")
        fill(storage)
        result = running.finish(timeout=HANG_SECONDS + 60)
        assert result.returncode == 1, result.stdout + result.stderr
        # The cause, said plainly: no traceback of det-estimator's own checkpoint code.
        assert "CheckpointError: A checkpoint could not be written into" in result.stderr, result.stderr
        assert "No space left on device" in result.stderr and "The checkpoints written before it stay valid" in (
            result.stderr
        )
        assert "Traceback" not in result.stderr, result.stderr
        (experiment,) = det.json("experiment", "list")
        trial = trial_of(det, experiment["id"])
        assert trial["state"] == "ERROR"
        assert_checkpoints_sound(det, experiment["id"], trial["checkpoint_dir"])
        listed = det.json("checkpoint", "list", experiment["id"])
        assert not any(Path(c["path"]).name.startswith(".") for c in listed)
        assert not any(entry.name.startswith(".partial-") for entry in Path(trial["checkpoint_dir"]).iterdir())


def test_a_checkpoint_file_system_turned_read_only_fails_clearly_and_resumes_once_writable(
    det, context, helpers, tmp_path
):
    with small_tmpfs(tmp_path / "small-fs", "8m") as storage:
        raw = helpers.fault_config(context, 40, None, max_restarts=0)
        raw["hyperparameters"].update(seconds_per_batch=0.2, resumed_at_full_speed=True)
        raw["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(storage)}
        raw["checkpoint_policy"] = "all"
        config = context.write_config(raw=raw)
        running = det.start("experiment", "create", config, context.directory)
        running.wait_for("checkpoint ")
        subprocess.run(["mount", "-o", "remount,ro", str(storage)], check=True)
        result = running.finish(timeout=HANG_SECONDS + 60)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "CheckpointError: A checkpoint could not be written into" in result.stderr, result.stderr
        assert "Read-only file system. The checkpoints written before it stay valid." in result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        (experiment,) = det.json("experiment", "list")
        assert_checkpoints_sound(det, experiment["id"], trial_of(det, experiment["id"])["checkpoint_dir"])

        subprocess.run(["mount", "-o", "remount,rw", str(storage)], check=True)
        resumed = det("experiment", "resume", experiment["id"], timeout=HANG_SECONDS + 60)
        assert resumed.returncode == 0 and "Experiment 1 COMPLETED after 40 batches." in resumed.stdout, resumed


def test_a_store_locked_by_another_writer_makes_the_job_wait_and_go_on(det, context, helpers, analytic, cli):
    raw = helpers.fault_config(context, 20, None, max_restarts=0)
    raw["hyperparameters"]["seconds_per_batch"] = 0.05
    config = context.write_config(raw=raw)
    running = det.start("experiment", "create", config, context.directory)
    running.wait_for("batches")
    held = threading.Event()

    def hold_the_lock():
        connection = sqlite3.connect(str(det.store), timeout=60, isolation_level=None)
        connection.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(6)
        connection.execute("COMMIT")
        connection.close()

    locker = threading.Thread(target=hold_the_lock)
    locker.start()
    assert held.wait(60)
    result = running.finish(timeout=HANG_SECONDS + 60)
    locker.join()
    assert result.returncode == 0, result.stdout + result.stderr
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["restarts"] == 0 and len(trial["runs"]) == 1
    batches = [v["batches"] for v in trial["validations"]]
    assert batches == [5, 10, 15, 20]  # nothing recorded was lost while it waited
    assert trial["validations"][-1]["metrics"]["weight"] == pytest.approx(
        helpers.closed_form_weight(analytic, cli, 20), rel=1e-5
    )


def corrupt(path: Path) -> None:
    """Overwrites the store's pages after the header with garbage, as a broken disk or a stray write might."""
    with ExperimentStore(path):
        pass  # checkpoints the WAL into the main file on close
    size = path.stat().st_size
    with open(path, "r+b") as file:
        file.seek(100)
        file.write(os.urandom(size - 100))


def test_a_corrupted_store_is_a_clear_error_without_a_traceback(det, context, helpers):
    config = context.write_config(raw=helpers.fault_config(context, 5, None))
    det.ok("experiment", "create", config, context.directory)
    corrupt(det.store)
    for command in [("experiment", "list"), ("experiment", "describe", "1"), ("trial", "logs", "1")]:
        result = det(*command)
        assert result.returncode == 2, (command, result.stdout + result.stderr)
        assert "Traceback" not in result.stderr, (command, result.stderr)
        assert str(det.store) in result.stderr, (command, result.stderr)
