"""The digits example (a premade tf.compat.v1 DNNClassifier) runs in test mode through the command."""

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_dnn"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_the_premade_classifier_trains_one_batch_with_exact_macro_f1(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    store = str(tmp_path / "store.sqlite")
    # Checkpoints go under the example's own runs/ (relative host_path): point them at tmp_path instead.
    config = (EXAMPLE / "const.yaml").read_text().replace("host_path: runs/checkpoints", f"host_path: {tmp_path}")
    (tmp_path / "const.yaml").write_text(config)
    result = subprocess.run(
        [
            COMMAND,
            "--store",
            store,
            "experiment",
            "create",
            str(tmp_path / "const.yaml"),
            str(EXAMPLE),
            "--test",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["state"] == "COMPLETED" and summary["batches_trained"] == 1
    best = summary["best_validation"]
    assert best["metric"] == "macro_f1" and 0.0 <= best["value"] <= 1.0
    (checkpoint,) = summary["checkpoints"]
    assert Path(checkpoint["saved_models"]["pixels"], "saved_model.pb").exists()
