"""context.fit on 1 and 2 processes matches model.fit on one; job run on 2 processes matches model.predict.

Real experiments through the command (``entrypoint_script``), under horovodrun on 2 slots,
each with a timeout.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from det_estimator.keras._engine._inference import load_model
from det_estimator.store import ExperimentStore

from .conftest import WORKERS, assert_a_paused_dropout_run_resumes_to_the_uninterrupted_weights, det_command

GLOBAL_BATCH_SIZE, LEARNING_RATE, EPOCHS = 32, 0.05, 3

# Under pytest-xdist, the whole module on one test process; its fixtures are session-scoped
# because that process may run other modules' tests between these, which would end a
# module-scoped fixture and run its experiments again.
pytestmark = pytest.mark.xdist_group("keras_api_fit_and_job")


def worker(name: str):
    spec = importlib.util.spec_from_file_location(f"keras_api_{name}", WORKERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(directory: Path, slots: int) -> Path:
    path = directory / f"fit-{slots}.yaml"
    raw = {
        "name": f"fit-linear-{slots}",
        "entrypoint_script": "python3 fit_linear.py",
        "hyperparameters": {"global_batch_size": GLOBAL_BATCH_SIZE, "learning_rate": LEARNING_RATE},
        "records_per_epoch": 256,
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": EPOCHS}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(directory / "checkpoints")},
        "resources": {"slots_per_trial": slots},
        "reproducibility": {"experiment_seed": 1},
    }
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """One experiment per slot count, run once: slots -> (store, experiment described)."""
    runs = {}
    for slots in (1, 2):
        directory = tmp_path_factory.mktemp(f"slots{slots}")
        store = directory / "store.sqlite"
        det_command(store, "experiment", "create", config(directory, slots), WORKERS, timeout=400)
        described = json.loads(det_command(store, "experiment", "describe", 1, "--json").stdout)
        runs[slots] = (store, described)
    return runs


@pytest.fixture(scope="session")
def reference():
    """model.fit on one process with the global batch, the same data order and validation data."""
    linear = worker("fit_linear")
    (x, y), (x_val, y_val) = linear.data()
    model = linear.build(LEARNING_RATE)
    history = model.fit(
        x, y, batch_size=GLOBAL_BATCH_SIZE, epochs=EPOCHS, shuffle=False, validation_data=(x_val, y_val), verbose=0
    )
    return history.history


@pytest.mark.parametrize("slots", [1, 2])
def test_context_fit_reports_the_validation_metrics_of_model_fit(trained, reference, slots):
    _, described = trained[slots]
    assert described["state"] == "COMPLETED"
    (trial,) = described["trials"]
    validations = trial["validations"]
    assert [v["metrics"]["epochs"] for v in validations] == list(range(1, EPOCHS + 1))
    assert [v["batches"] for v in validations] == [8 * epoch for epoch in range(1, EPOCHS + 1)]
    assert [v["metrics"]["loss"] for v in validations] == pytest.approx(reference["val_loss"], rel=1e-5)
    assert [v["metrics"]["mae"] for v in validations] == pytest.approx(reference["val_mae"], rel=1e-5)


@pytest.mark.parametrize("slots", [1, 2])
def test_context_fit_returns_the_history_of_model_fit(trained, reference, slots):
    _, described = trained[slots]
    (trial,) = described["trials"]
    log = Path(trial["log_path"]).read_text()
    (line,) = [line for line in log.splitlines() if "HISTORY " in line]
    history = json.loads(line.split("HISTORY ", 1)[1])
    assert sorted(history) == sorted(reference)
    for name, values in reference.items():
        assert history[name] == pytest.approx(values, rel=1e-5), name


def test_job_run_on_two_processes_gives_model_predict_of_the_whole_input_in_order(trained, tmp_path):
    store, described = trained[2]
    trial_id = described["trials"][0]["id"]
    output = tmp_path / "predictions.npy"
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "entrypoint_script": "python3 predict_linear.py",
                "data": {"trial_id": trial_id, "batch_size": 7, "output": str(output)},
                "resources": {"slots": 2},
            }
        )
    )
    result = det_command(store, "job", "run", job, WORKERS, "--json", timeout=300)
    record = json.loads(result.stdout)
    assert record["state"] == "COMPLETED" and record["slots"] == 2 and record["kind"] == "BATCH_INFERENCE"

    with ExperimentStore(store) as opened:
        best = min(opened.checkpoints(1, trial_id=trial_id), key=lambda c: c.validation_metrics["val_loss"])
    model = load_model(Path(best.path))
    inputs = worker("predict_linear").inputs()
    expected = model.predict(inputs, batch_size=len(inputs), verbose=0)
    predictions = np.load(output)
    assert predictions.shape == expected.shape == (101, 1)
    np.testing.assert_allclose(predictions, expected, rtol=1e-6, atol=1e-6)
    # Both processes took part, each predicting its share.
    log = det_command(store, "job", "logs", record["id"]).stdout
    assert "process 0 of 2 predicted 51 rows" in log and "process 1 of 2 predicted 50 rows" in log
    listed = json.loads(det_command(store, "job", "list", "--json").stdout)
    assert [(job["id"], job["state"]) for job in listed] == [(record["id"], "COMPLETED")]
    tf.keras.backend.clear_session()


def test_a_paused_trial_on_two_processes_resumes_with_each_process_s_dropout_masks(tmp_path, monkeypatch):
    assert_a_paused_dropout_run_resumes_to_the_uninterrupted_weights(
        tmp_path, monkeypatch, "python3 fit_dropout.py", []
    )
