"""examples/iris_callback: the guide's Iris script, in test mode on one process and for real on two."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from det_estimator.checkpoint import read_checkpoint

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "iris_callback"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
TIMEOUT = 400


def config(tmp_path: Path, name: str, epochs=None) -> Path:
    raw = yaml.safe_load((EXAMPLE / name).read_text())
    raw["checkpoint_storage"]["host_path"] = str(tmp_path / "checkpoints")
    if epochs is not None:
        raw["searcher"]["max_length"] = {"epochs": epochs}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def det(store: Path, *args) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [COMMAND, "--store", str(store), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def describe(store: Path, experiment_id: int) -> dict:
    (trial,) = json.loads(det(store, "experiment", "describe", experiment_id, "--json").stdout)["trials"]
    return trial


def test_in_test_mode_it_trains_validates_and_checkpoints(tmp_path):
    store = tmp_path / "store.sqlite"
    result = det(store, "experiment", "create", "--test", config(tmp_path, "const.yaml"), EXAMPLE)
    assert "Experiment 1 COMPLETED after 1 batches." in result.stdout, result.stdout[-3000:]
    (validation,) = describe(store, 1)["validations"]
    assert {"val_categorical_accuracy", "categorical_accuracy", "loss"} <= set(validation["metrics"])
    (checkpoint,) = json.loads(det(store, "checkpoint", "list", 1, "--json").stdout)
    state = read_checkpoint(checkpoint["path"]).metadata
    assert (state["epoch"], state["steps_completed"], state["continue_id"]) == (1, 1, 1)
    assert list((tmp_path / "checkpoints").rglob("*")), "checkpoints go where the config says"


@pytest.mark.slow
def test_on_two_processes_it_validates_as_on_one(tmp_path):
    store = tmp_path / "store.sqlite"
    det(store, "experiment", "create", config(tmp_path, "const.yaml", epochs=10), EXAMPLE)
    result = det(store, "experiment", "create", config(tmp_path, "distributed.yaml", epochs=10), EXAMPLE)
    assert "Experiment 2 COMPLETED after 40 batches." in result.stdout, result.stdout[-3000:]
    one, two = describe(store, 1), describe(store, 2)
    assert len(one["validations"]) == len(two["validations"]) == 10
    # The same global batches in the same order: the same model, up to float32 round-off.
    for alone, shared in zip(one["validations"], two["validations"]):
        assert shared["metrics"]["loss"] == pytest.approx(alone["metrics"]["loss"], rel=1e-4)
        assert shared["metrics"]["val_categorical_accuracy"] == alone["metrics"]["val_categorical_accuracy"]
