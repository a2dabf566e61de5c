"""The Core API example: a NumPy script launched by the command, on 1 and 2 processes, paused and resumed."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from det_estimator.store import ExperimentStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "core_linear"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
TIMEOUT = 240


def closed_form(batches: int, learning_rate: float) -> tuple[np.ndarray, float]:
    """Full-batch gradient descent on the example's data: the weights after ``batches`` steps and the last loss."""
    x = np.linspace(-1.0, 1.0, 64)
    y = 3.0 * x + 0.5
    weights, loss = np.zeros(2), float("nan")
    for _ in range(batches):
        error = weights[0] * x + weights[1] - y
        loss = float(error @ error / len(x))
        weights = weights - learning_rate * 2 * np.array([error @ x, error.sum()]) / len(x)
    return weights, loss


@pytest.fixture
def context(tmp_path):
    """A copy of the example whose checkpoints go under tmp_path."""
    directory = tmp_path / "core_linear"
    shutil.copytree(EXAMPLE, directory)
    return directory


def write_config(context: Path, name: str, batches: int, slots: int = 1) -> Path:
    config = yaml.safe_load((context / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": batches}
    config["resources"] = {"slots_per_trial": slots}
    path = context / name
    path.write_text(yaml.safe_dump(config))
    return path


def det(store: Path, *args, check=True) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [COMMAND, "--store", str(store), *map(str, args)], capture_output=True, text=True, env=env, timeout=TIMEOUT
    )
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def validation(store: Path, experiment_id: int) -> dict:
    (trial,) = json.loads(det(store, "experiment", "describe", experiment_id, "--json").stdout)["trials"]
    return trial["validations"][-1]


# Two slots run under horovodrun, the default launcher of a script's entrypoint, or without
# Horovod (the current stack) under the TensorFlow launcher.
@pytest.mark.parametrize("slots", [1, 2])
def test_the_script_reaches_the_closed_form_on_one_and_two_processes(context, tmp_path, slots):
    store = tmp_path / "store.sqlite"
    result = det(store, "experiment", "create", write_config(context, "run.yaml", 300, slots), context)
    assert "Experiment 1 COMPLETED after 300 batches." in result.stdout
    assert [int(b) for b in re.findall(r"batches (\d+)/300", result.stdout)] == list(range(50, 301, 50))
    weights, loss = closed_form(300, 0.02)
    last = validation(store, 1)
    assert last["batches"] == 300
    assert last["metrics"]["slope"] == pytest.approx(weights[0], rel=1e-12)
    assert last["metrics"]["loss"] == pytest.approx(loss, rel=1e-9)
    (checkpoint,) = json.loads(det(store, "checkpoint", "list", 1, "--json").stdout)
    assert checkpoint["batches"] == 300 and (Path(checkpoint["path"]) / "state.npz").is_file()


# Two slots run under horovodrun, the default launcher of a script's entrypoint, or without
# Horovod (the current stack) under the TensorFlow launcher.
@pytest.mark.parametrize("slots", [1, 2])
def test_a_paused_script_resumes_where_it_stopped(context, tmp_path, slots):
    store = tmp_path / "store.sqlite"
    stopped = _pause_a_long_run(context, store, slots)

    # Resumed with a shorter length: it trains on from the checkpoint of the pause to the new end.
    _set_length(store, stopped + 100)
    resumed = det(store, "experiment", "resume", 1)
    assert f"resumed after {stopped} batches" in resumed.stdout
    weights, loss = closed_form(stopped + 100, 0.02)
    last = validation(store, 1)
    assert last["batches"] == stopped + 100
    assert last["metrics"]["slope"] == pytest.approx(weights[0], rel=1e-12)


def test_a_script_paused_at_the_end_of_its_operation_validates_on_resume(context, tmp_path):
    # It checks for a pause only after a checkpoint, so a pause in the last 50 batches before
    # the end of an operation (max_length, or an adaptive search's rung) stops it there.
    store = tmp_path / "store.sqlite"
    stopped = _pause_a_long_run(context, store)

    # The operation ends where the pause stopped it: the resumed run only validates.
    _set_length(store, stopped)
    resumed = det(store, "experiment", "resume", 1)
    assert f"COMPLETED after {stopped} batches" in resumed.stdout
    weights, loss = closed_form(stopped, 0.02)
    last = validation(store, 1)
    assert last["batches"] == stopped
    assert last["metrics"]["loss"] == pytest.approx(loss, rel=1e-9)
    assert last["metrics"]["slope"] == pytest.approx(weights[0], rel=1e-12)


def _pause_a_long_run(context: Path, store: Path, slots: int = 1) -> int:
    """Runs experiment 1 far longer than a test and pauses it after its first checkpoint; returns its batches."""
    batches = 3_000_000  # only the pause ends the run
    config = write_config(context, "long.yaml", batches, slots)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    running = subprocess.Popen(
        [COMMAND, "--store", str(store), "experiment", "create", str(config), str(context)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        for line in running.stdout:
            if line.startswith("checkpoint "):
                break
        det(store, "experiment", "pause", 1)
        output, _ = running.communicate(timeout=TIMEOUT)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 0 and "Experiment 1 PAUSED after " in output, output[-3000:]
    stopped = json.loads(det(store, "experiment", "list", "--json").stdout)[0]["batches_trained"]
    assert 0 < stopped < batches
    return stopped


def _set_length(store: Path, batches: int) -> None:
    """Sets the recorded experiment's length, so that a resume trains to it."""
    with ExperimentStore(store) as opened:
        experiment = opened.experiment(1)
        config = experiment.config
        config["searcher"]["max_length"] = {"batches": batches}
        opened.update_experiment(1, config, experiment.slots, experiment.test)


def test_run_by_hand_it_is_recorded_and_the_command_resumes_it(context, tmp_path):
    store = tmp_path / "store.sqlite"
    env = dict(os.environ, DET_ESTIMATOR_STORE=str(store))
    by_hand = subprocess.run(
        [sys.executable, "train.py"], cwd=context, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert by_hand.returncode == 0, by_hand.stderr[-3000:]

    (experiment,) = json.loads(det(store, "experiment", "list", "--json").stdout)
    assert (experiment["name"], experiment["state"], experiment["batches_trained"]) == (
        "core-linear",
        "COMPLETED",
        1000,
    )
    assert experiment["command"] == [Path(sys.executable).name, "train.py"]
    weights, _ = closed_form(1000, 0.02)
    assert validation(store, 1)["metrics"]["slope"] == pytest.approx(weights[0], rel=1e-12)

    # Grown by hand to 1200 batches, the command resumes it: the same script, from its checkpoint.
    _set_length(store, 1200)
    with ExperimentStore(store) as opened:
        opened.set_state(1, "PAUSED")
    resumed = det(store, "experiment", "resume", 1)
    assert "resumed after 1000 batches" in resumed.stdout and "COMPLETED after 1200 batches" in resumed.stdout
    weights, _ = closed_form(1200, 0.02)
    assert validation(store, 1)["metrics"]["slope"] == pytest.approx(weights[0], rel=1e-12)
