"""examples/digits_keras_api through the command: test mode; pause and resume, the full run on 2 processes (slow)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml
from sklearn.datasets import load_digits

from det_estimator.keras._engine import _keras_compat
from det_estimator.keras._engine._inference import load_model
from det_estimator.store import ExperimentStore

from .conftest import COMMAND

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_keras_api"
BATCHES_PER_EPOCH = 47  # 1500 records in global batches of 32


@pytest.fixture
def example(tmp_path):
    """A copy of the example whose checkpoints and predictions go under tmp_path."""
    directory = tmp_path / "digits_keras_api"
    shutil.copytree(EXAMPLE, directory, ignore=shutil.ignore_patterns("runs", "checkpoints"))
    for name in ("const.yaml", "distributed.yaml", "batch_inference.yaml"):
        path = directory / name
        path.write_text(path.read_text().replace("host_path: runs/checkpoints", f"host_path: {tmp_path}/checkpoints"))
    return directory


def job_config(example: Path, trial_id: int, slots: int) -> Path:
    raw = yaml.safe_load((example / "batch_inference.yaml").read_text())
    raw["data"].update(trial_id=trial_id, output=str(example.parent / "predictions.npy"))
    raw["resources"] = {"slots": slots}
    path = example.parent / f"job-{slots}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def described(det, store: Path, experiment_id: int = 1) -> dict:
    return json.loads(det(store, "experiment", "describe", experiment_id, "--json").stdout)


def test_the_example_runs_in_test_mode_and_its_job_predicts_every_digit(example, tmp_path, det):
    store = tmp_path / "store.sqlite"
    result = det(store, "experiment", "create", example / "const.yaml", example, "--test", timeout=300)
    assert "Experiment 1 COMPLETED after 1 batches." in result.stdout
    summary = described(det, store)
    (trial,) = summary["trials"]
    assert trial["validations"] and trial["validations"][-1]["batches"] == 1
    (checkpoint,) = summary["checkpoints"]
    assert (Path(checkpoint["path"]) / "model" / "architecture.json").is_file()

    det(store, "job", "run", job_config(example, trial["id"], slots=1), example, timeout=300)
    probabilities = np.load(tmp_path / "predictions.npy")
    assert probabilities.shape == (1797, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


# One process's evaluation of a checkpoint over the whole validation set, in a Python of the
# Keras that wrote it: the example's model, built as in training, with the checkpoint's weights.
_EVALUATE_CHECKPOINT = """
import json, sys
import train
from det_estimator.keras._engine import _keras_compat
from det_estimator.keras._engine._inference import load_model
hparams = json.loads(sys.argv[2])
model = load_model(sys.argv[1], model=train.build_model(hparams))
model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
_, (x_val, y_val) = train.load_data()
print(json.dumps(model.evaluate(x_val, y_val, batch_size=64, return_dict=True, verbose=0)))
"""


# On two processes the example validates as one process does on the whole validation set:
# under Horovod, or (where it is missing) as the workers of a MultiWorkerMirroredStrategy.
# tf-keras runs the Keras 2 code paths: a long run here. Keras 2 under the strategy runs every
# time in the estimator lane through det.keras.init() (test_init_under_tensorflow_launcher.py);
# there this example runs under Horovod.
@pytest.mark.parametrize("keras", ["tf.keras", pytest.param("tf-keras", marks=pytest.mark.slow)])
def test_on_two_processes_it_completes_and_validates_as_one_process_on_all_the_data(example, tmp_path, det, keras):
    if keras == "tf-keras" and not _keras_compat.KERAS_3:
        pytest.skip("tf.keras is Keras 2 here: the tf.keras case runs it already")
    raw = yaml.safe_load((example / "distributed.yaml").read_text())
    raw["searcher"]["max_length"] = {"epochs": 2}
    variables = {"TF_USE_LEGACY_KERAS": "1"} if keras == "tf-keras" else {}
    raw["environment"] = {"environment_variables": [f"{name}={value}" for name, value in variables.items()]}
    config = example / "short.yaml"
    config.write_text(yaml.safe_dump(raw))
    store = tmp_path / "store.sqlite"
    result = det(store, "experiment", "create", config, example, timeout=400)
    assert f"Experiment 1 COMPLETED after {2 * BATCHES_PER_EPOCH} batches." in result.stdout, result.stdout[-3000:]
    summary = described(det, store)
    assert summary["slots"] == 2
    validations = summary["trials"][0]["validations"]
    assert [v["batches"] for v in validations] == [BATCHES_PER_EPOCH, 2 * BATCHES_PER_EPOCH]

    with ExperimentStore(store) as opened:
        last = max(opened.checkpoints(1), key=lambda checkpoint: checkpoint.batches)
    assert last.batches == 2 * BATCHES_PER_EPOCH
    evaluated = subprocess.run(
        [sys.executable, "-c", _EVALUATE_CHECKPOINT, last.path, json.dumps(raw["hyperparameters"])],
        capture_output=True,
        text=True,
        cwd=example,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **variables),
        timeout=120,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    one_process = json.loads(evaluated.stdout.strip().splitlines()[-1])
    reported = validations[-1]["metrics"]
    assert reported["val_accuracy"] == reported["accuracy"] == pytest.approx(one_process["accuracy"], abs=1e-7)
    assert reported["loss"] == pytest.approx(one_process["loss"], rel=1e-5)


# The example paused by the command and resumed, as an uninterrupted run: three runs of the
# example. In the default path, the new Keras API resumes a pause as an uninterrupted run
# (test_init_by_hand.py; on two processes, test_fit_and_job_on_processes.py), and the
# command pauses and resumes trials (tests/cli).
@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
def test_a_paused_trial_resumes_where_it_stopped(example, tmp_path, det, slots):
    store = tmp_path / "store.sqlite"
    raw = yaml.safe_load((example / "const.yaml").read_text())
    raw["searcher"]["max_length"] = {"epochs": 10_000}  # only the pause ends the first run
    raw["resources"] = {"slots_per_trial": slots}
    config = example / "long.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    running = subprocess.Popen(
        [COMMAND, "--store", str(store), "experiment", "create", str(config), str(example)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        for line in running.stdout:
            if line.startswith("checkpoint "):
                break
        det(store, "experiment", "pause", 1)
        output, _ = running.communicate(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 0 and "Experiment 1 PAUSED after " in output, output[-3000:]
    stopped = json.loads(det(store, "experiment", "list", "--json").stdout)[0]["batches_trained"]
    assert BATCHES_PER_EPOCH <= stopped < 10_000 * BATCHES_PER_EPOCH
    epochs = stopped // BATCHES_PER_EPOCH + 2

    with ExperimentStore(store) as opened:
        experiment = opened.experiment(1)
        experiment.config["searcher"]["max_length"] = {"epochs": epochs}
        opened.update_experiment(1, experiment.config, experiment.slots, experiment.test)
    resumed = det(store, "experiment", "resume", 1, timeout=400)
    assert f"COMPLETED after {epochs * BATCHES_PER_EPOCH} batches" in resumed.stdout, resumed.stdout[-3000:]
    validations = described(det, store)["trials"][0]["validations"]
    # One validation per epoch, each once: the resumed run went on from the pause, not from epoch 0.
    assert [v["metrics"]["epochs"] for v in validations] == list(range(1, epochs + 1))
    assert [v["batches"] for v in validations] == [BATCHES_PER_EPOCH * e for e in range(1, epochs + 1)]

    # The same trial without a pause validates alike: the resumed one went on with the
    # optimizer's state and the dropout masks where the pause left them.
    raw["searcher"]["max_length"] = {"epochs": epochs}
    config.write_text(yaml.safe_dump(raw))
    det(store, "experiment", "create", config, example, timeout=400)
    uninterrupted = described(det, store, 2)["trials"][0]["validations"]
    assert [v["batches"] for v in uninterrupted] == [v["batches"] for v in validations]
    for resumed_validation, straight in zip(validations, uninterrupted):
        assert resumed_validation["metrics"]["loss"] == pytest.approx(straight["metrics"]["loss"], rel=1e-6)


@pytest.mark.slow
def test_the_example_in_full_on_two_processes_and_its_job_on_two(example, tmp_path, det):
    store = tmp_path / "store.sqlite"
    det(store, "experiment", "create", example / "distributed.yaml", example, timeout=600)
    summary = described(det, store)
    assert summary["state"] == "COMPLETED" and summary["best_validation"]["value"] > 0.9
    trial_id = summary["trials"][0]["id"]
    det(store, "job", "run", job_config(example, trial_id, slots=2), example, timeout=400)

    with ExperimentStore(store) as opened:
        best = max(opened.checkpoints(1, trial_id=trial_id), key=lambda c: c.validation_metrics["val_accuracy"])
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    expected = load_model(Path(best.path)).predict(x, batch_size=64, verbose=0)
    predictions = np.load(tmp_path / "predictions.npy")
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-6)
    assert (predictions.argmax(axis=1) == digits.target).mean() > 0.9
    tf.keras.backend.clear_session()
