"""DeterminedCallback on 2 processes under the TensorFlow launcher, run by `det-estimator experiment create`.

A linear regression (SGD with momentum, fixed data order) on a MultiWorkerMirroredStrategy
of 2 workers: SIGKILLed at a random batch and restarted from its latest checkpoint, paused
and resumed, or warm-started with another continue_id, it ends with the weights plain Keras
reaches on one process (the same global batches; equal up to float32 round-off).
"""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from det_estimator.keras._engine import _keras_compat
from det_estimator.store import ExperimentStore

from .linear_script import GLOBAL_BATCH, RECORDS, build_model, dataset

COMMAND = str(Path(sys.executable).with_name("det-estimator"))
SCRIPT = Path(__file__).with_name("linear_script.py")
STEPS_PER_EPOCH = RECORDS // GLOBAL_BATCH
TIMEOUT = 300


def plain_fit(epochs: int, start_weights=None) -> np.ndarray:
    model = build_model()
    if start_weights is not None:
        model.set_weights(start_weights)
    model.fit(dataset(0, 1), epochs=epochs, verbose=0)
    return np.concatenate([w.numpy().ravel() for w in model.weights])


def plain_validation_losses(epochs: int) -> list[float]:
    """Plain Keras' validation loss after each epoch, on one process."""
    model = build_model()
    history = model.fit(dataset(0, 1), epochs=epochs, validation_data=dataset(0, 1), verbose=0)
    return history.history["val_loss"]


@pytest.fixture
def context(tmp_path):
    directory = tmp_path / "context"
    directory.mkdir()
    shutil.copy(SCRIPT, directory)
    config = {
        "name": "linear-callback",
        "entrypoint": "python3 -m det_estimator.launch.tensorflow -- python3 linear_script.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 4 * STEPS_PER_EPOCH}},
        "resources": {"slots_per_trial": 2},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        "max_restarts": 1,
    }
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    return directory


def det(store: Path, *args, env=None, check=True, timeout=TIMEOUT) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [COMMAND, "--store", str(store), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def final_checkpoint(store: Path, experiment_id: int):
    with ExperimentStore(store) as opened:
        return max(opened.checkpoints(experiment_id), key=lambda c: c.batches)


def test_sigkilled_at_a_random_batch_it_resumes_to_the_uninterrupted_weights(context, tmp_path):
    store = tmp_path / "store.sqlite"
    kill_at, kill_rank = random.randint(2, 4 * STEPS_PER_EPOCH - 1), random.randint(0, 1)
    env = {
        "LINEAR_KILL_AT": str(kill_at),
        "LINEAR_KILL_RANK": str(kill_rank),
        "LINEAR_KILL_MARKER": str(tmp_path / "killed"),
        "LINEAR_CHECKPOINT_BATCHES": "3",
        "LINEAR_OUT": str(tmp_path / "weights.npy"),
    }
    result = det(store, "experiment", "create", context / "config.yaml", context, env=env)
    note = f"killed rank {kill_rank} at batch {kill_at}\n" + result.stdout[-4000:]
    assert (tmp_path / "killed").read_text() == str(kill_at), note
    assert "restart 1 of 1" in result.stdout and "COMPLETED after 32 batches" in result.stdout, note
    with ExperimentStore(store) as opened:
        (first_run, second_run) = opened.trial_runs(1)
    # The second run started from the latest checkpoint before the kill: a multiple of 3 or an epoch's end.
    assert first_run.exit_status != 0 and second_run.start_batches <= kill_at, note
    assert second_run.start_batches in {b for b in range(0, kill_at + 1) if b % 3 == 0 or b % STEPS_PER_EPOCH == 0}
    weights = np.load(tmp_path / "weights.npy")
    np.testing.assert_allclose(weights, plain_fit(4), rtol=1e-5, atol=1e-6, err_msg=note)


@pytest.mark.slow
def test_paused_by_the_command_it_resumes_exactly_and_another_continue_id_starts_from_its_weights(context, tmp_path):
    store = tmp_path / "store.sqlite"
    env = {"LINEAR_SLEEP": "0.3", "LINEAR_OUT": str(tmp_path / "weights.npy")}
    running = subprocess.Popen(
        [COMMAND, "--store", str(store), "experiment", "create", str(context / "config.yaml"), str(context)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
    )
    try:
        for line in running.stdout:
            if "batches 4/32" in line:
                break
        det(store, "experiment", "pause", 1)
        output, _ = running.communicate(timeout=TIMEOUT)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 0 and "Experiment 1 PAUSED after " in output, output[-3000:]
    (experiment,) = json.loads(det(store, "experiment", "list", "--json").stdout)
    stopped = experiment["batches_trained"]
    assert 4 <= stopped < 32
    assert final_checkpoint(store, 1).batches == stopped

    resumed = det(store, "experiment", "resume", 1, env={"LINEAR_OUT": str(tmp_path / "weights.npy")})
    assert f"resumed after {stopped} batches" in resumed.stdout and "COMPLETED after 32 batches" in resumed.stdout
    weights = np.load(tmp_path / "weights.npy")
    np.testing.assert_allclose(weights, plain_fit(4), rtol=1e-5, atol=1e-6)
    # The validations, each at an epoch's end (the paused epoch's in the resumed run), are plain Keras'.
    (trial,) = json.loads(det(store, "experiment", "describe", 1, "--json").stdout)["trials"]
    assert [v["batches"] for v in trial["validations"]] == [8, 16, 24, 32]
    losses = [v["metrics"]["loss"] for v in trial["validations"]]
    np.testing.assert_allclose(losses, plain_validation_losses(4), rtol=1e-5)

    # Started from that run's last checkpoint with another continue_id: 2 epochs from epoch 0,
    # its weights first (on one process, in the default path: test_determined_callback.py).
    last = final_checkpoint(store, 1)
    warm = {"LINEAR_CHECKPOINT": last.uuid, "LINEAR_CONTINUE_ID": "another", "LINEAR_EPOCHS": "2"}
    warm["LINEAR_OUT"] = str(tmp_path / "warm.npy")
    result = det(store, "experiment", "create", context / "config.yaml", context, env=warm)
    assert "COMPLETED after 16 batches" in result.stdout, result.stdout[-3000:]
    start = [weights[:-1].reshape(-1, 1), weights[-1:]]
    np.testing.assert_allclose(np.load(tmp_path / "warm.npy"), plain_fit(2, start), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.horovod
def test_under_horovod_sigkilled_and_restarted_it_ends_with_the_uninterrupted_weights(context, tmp_path):
    config = yaml.safe_load((context / "config.yaml").read_text())
    config["entrypoint"] = "python3 -m det_estimator.launch.horovod -- python3 linear_script.py"
    (context / "horovod.yaml").write_text(yaml.safe_dump(config))
    store = tmp_path / "store.sqlite"
    kill_at = random.randint(2, 4 * STEPS_PER_EPOCH - 1)
    env = {
        "LINEAR_ENGINE": "horovod",
        "LINEAR_KILL_AT": str(kill_at),
        "LINEAR_KILL_MARKER": str(tmp_path / "killed"),
        "LINEAR_CHECKPOINT_BATCHES": "3",
        "LINEAR_OUT": str(tmp_path / "weights.npy"),
    }
    result = det(store, "experiment", "create", context / "horovod.yaml", context, env=env)
    note = f"killed at batch {kill_at}\n" + result.stdout[-4000:]
    assert (tmp_path / "killed").exists() and "restart 1 of 1" in result.stdout, note
    np.testing.assert_allclose(np.load(tmp_path / "weights.npy"), plain_fit(4), rtol=1e-5, atol=1e-6, err_msg=note)


def test_several_steps_per_execution_train_under_tf_keras_and_are_refused_clearly_under_keras_3(context, tmp_path):
    store = tmp_path / "store.sqlite"
    env = {"LINEAR_STEPS_PER_EXECUTION": "4", "LINEAR_OUT": str(tmp_path / "weights.npy")}
    result = det(store, "experiment", "create", context / "config.yaml", context, env=env, check=False)
    if _keras_compat.KERAS_3:
        # Keras 3's own fit fails there at its first execution; the callback says so before it.
        assert result.returncode == 1, result.stdout[-3000:]
        assert "compiled with steps_per_execution=4, and Keras 3's model.fit fails" in result.stdout, result.stdout
        assert "must feed a value for placeholder" not in result.stdout
    else:
        assert result.returncode == 0 and "COMPLETED after 32 batches" in result.stdout, result.stdout[-3000:]
        np.testing.assert_allclose(np.load(tmp_path / "weights.npy"), plain_fit(4), rtol=1e-5, atol=1e-6)
