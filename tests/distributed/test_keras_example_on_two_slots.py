"""The Keras example (examples/ctr_keras) in full on two processes, through the command: its AUC is exact."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from sklearn.metrics import roc_auc_score

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ctr_keras"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


@pytest.mark.slow
def test_the_keras_example_trains_in_full_on_two_slots_with_the_exact_auc(runs, tmp_path, example_config):
    config = example_config("ctr_keras", "distributed.yaml")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [COMMAND, "--store", str(tmp_path / "store.sqlite"), "experiment", "create", str(config), str(EXAMPLE)]
    with (tmp_path / "progress.txt").open("w") as progress:
        process = subprocess.Popen(
            [*command, "--json"], stdout=subprocess.PIPE, stderr=progress, text=True, env=env, start_new_session=True
        )
        output = runs.communicate_or_kill(process, 600, "the Keras example on 2 slots")
    assert process.returncode == 0, (tmp_path / "progress.txt").read_text()[-5000:]
    summary = json.loads(output)
    assert summary["state"] == "COMPLETED" and summary["batches_trained"] == summary["max_batches"]
    best = summary["best_validation"]
    assert best["metric"] == "val_auc" and best["value"] > 0.85

    # The reported AUC is scikit-learn's over the whole validation set, which both processes shared.
    (checkpoint,) = summary["checkpoints"]
    spec = importlib.util.spec_from_file_location("ctr_keras_model_def", EXAMPLE / "model_def.py")
    model_def = importlib.util.module_from_spec(spec)  # under a name of its own: other examples have a model_def
    spec.loader.exec_module(model_def)
    features, labels = model_def.synthetic_clicks(50_000, seed=2)
    serve = tf.saved_model.load(checkpoint["saved_models"]["saved_model"]).signatures["serving_default"]
    probabilities = serve(x=tf.constant(features))["probability"].numpy().ravel()
    metrics = json.loads((Path(checkpoint["path"]) / "metadata.json").read_text())["validation_metrics"]
    assert metrics["val_auc"] == pytest.approx(roc_auc_score(labels, probabilities), abs=1e-6)
    assert abs(metrics["val_binned_auc"] - metrics["val_auc"]) > 1e-4  # Keras' own, binned
