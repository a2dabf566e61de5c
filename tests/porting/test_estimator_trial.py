"""An EstimatorTrial and config of the reference's, ported by changing the import line only (estimator_trial/).

Checked against the closed form of its SGD: on one process, and on two under horovodrun,
paused and resumed; its checkpoint loaded as the reference's documentation loads one.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.estimator

TRIAL_DIR = Path(__file__).parent / "estimator_trial"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
TIMEOUT_SECONDS = 280


def reference_config() -> dict:
    return yaml.safe_load((TRIAL_DIR / "const.yaml").read_text())


def closed_form(batches: int, learning_rate: float, global_batch_size: int) -> tuple:
    """``(weight, bias)`` after ``batches`` steps of SGD on the mean squared error, the batches in order, repeated."""
    model = load_trial()
    weight = bias = 0.0
    per_epoch = model.NUM_RECORDS // global_batch_size
    for step in range(batches):
        start = (step % per_epoch) * global_batch_size
        x = model.FEATURES[start : start + global_batch_size].astype(np.float64)
        y = model.LABELS[start : start + global_batch_size].astype(np.float64)
        error = weight * x + bias - y
        weight, bias = weight - learning_rate * 2 * np.mean(error * x), bias - learning_rate * 2 * np.mean(error)
    return weight, bias


def load_trial():
    sys.path.insert(0, str(TRIAL_DIR))
    try:
        import model_def
    finally:
        sys.path.remove(str(TRIAL_DIR))
    return model_def


def assert_follows_the_closed_form(validations: list, config: dict) -> None:
    model = load_trial()
    hparams = config["hyperparameters"]
    assert [v["batches"] for v in validations] == [8, 16, 24]
    for validation in validations:
        metrics = validation["metrics"]
        weight, bias = closed_form(validation["batches"], hparams["learning_rate"], hparams["global_batch_size"])
        assert (metrics["weight"], metrics["bias"]) == pytest.approx((weight, bias), rel=1e-5)
        # The reducers' values over every process's records: their mean prediction, and the labels' sum.
        assert metrics["avg_prediction"] == pytest.approx(np.mean(weight * model.FEATURES + bias), abs=1e-5)
        assert metrics["label_sum"] == pytest.approx(float(np.sum(model.LABELS)), rel=1e-6)


def counted_batches(checkpoint_path: str) -> int:
    """What the RunHook wrote into the checkpoint: the batches it counted, across resumes."""
    return int((Path(checkpoint_path) / "batches.txt").read_text())


def test_the_ported_trial_and_config_run_on_one_process_and_load_the_reference_way(tmp_path, monkeypatch):
    import tensorflow as tf

    import det_estimator as det  # the ported trial's own import

    monkeypatch.setenv("HOME", str(tmp_path))  # the retention-only storage's default location is under it
    monkeypatch.syspath_prepend(str(TRIAL_DIR))
    config = reference_config()
    outcome = det.run_trial(load_trial().LinearTrial, config)

    assert (outcome.state, outcome.batches_trained) == ("COMPLETED", 24)
    assert_follows_the_closed_form(outcome.validations, config)
    path = outcome.checkpoints[-1]["path"]
    assert Path(path).is_relative_to(tmp_path / ".det-estimator" / "checkpoints")
    assert counted_batches(path) == 24
    # As the reference's documentation loads an EstimatorTrial's checkpoint.
    model = det.estimator.load_estimator_from_checkpoint_path(path)
    inputs = np.array([-0.5, 0.0, 2.0], dtype=np.float32)
    predictions = model.signatures["serving_default"](x=tf.constant(inputs))["y"].numpy()
    weight, bias = closed_form(24, config["hyperparameters"]["learning_rate"], 8)
    np.testing.assert_allclose(predictions, weight * inputs + bias, rtol=1e-5)


def det_command(store: Path, *args: str) -> list:
    return [COMMAND, "--store", str(store), *map(str, args)]


@pytest.mark.slow
@pytest.mark.horovod
def test_the_ported_trial_pauses_and_resumes_exactly_on_two_processes(tmp_path):
    config = reference_config()
    config["hyperparameters"]["seconds_per_batch"] = 0.2  # time to pause between two validations
    config["resources"]["slots_per_trial"] = 2
    code = tmp_path / "code"
    code.mkdir()
    (code / "model_def.py").write_text((TRIAL_DIR / "model_def.py").read_text())
    (code / "const.yaml").write_text(yaml.safe_dump(config))
    store = tmp_path / "store.sqlite"
    env = dict(os.environ, HOME=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("DET_ESTIMATOR_STORE", None)

    create = det_command(store, "experiment", "create", code / "const.yaml", code)
    process = subprocess.Popen(create, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in process.stdout:
            if "checkpoint " in line:  # the first, at the first validation
                process.send_signal(signal.SIGINT)  # Ctrl-C: the command pauses the trial
                break
        output, _ = process.communicate(timeout=TIMEOUT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    paused = json.loads(subprocess.check_output(det_command(store, "experiment", "list", "--json"), env=env))
    assert paused[0]["state"] == "PAUSED" and paused[0]["batches_trained"] < 24

    resumed = subprocess.run(
        det_command(store, "experiment", "resume", 1), capture_output=True, text=True, env=env, timeout=TIMEOUT_SECONDS
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    described = json.loads(subprocess.check_output(det_command(store, "experiment", "describe", 1, "--json"), env=env))
    (trial,) = described["trials"]
    assert trial["state"] == "COMPLETED" and len(trial["runs"]) == 2
    assert_follows_the_closed_form(trial["validations"], config)
    (latest,) = [c for c in described["checkpoints"] if c["batches"] == 24]
    assert counted_batches(latest["path"]) == 24  # the RunHook's count came back with the checkpoint
