"""The Keras example (examples/ctr_keras) in test mode through the command, then its scoring script."""

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ctr_keras"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_the_keras_example_trains_one_batch_with_exact_auc_and_scores_with_its_saved_model(tmp_path, example_config):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    config = example_config("ctr_keras")
    command = [COMMAND, "--store", str(tmp_path / "store.sqlite"), "experiment", "create", str(config), str(EXAMPLE)]
    result = subprocess.run([*command, "--test", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["state"] == "COMPLETED" and summary["batches_trained"] == 1
    best = summary["best_validation"]
    assert best["metric"] == "val_auc" and 0.0 <= best["value"] <= 1.0
    (checkpoint,) = summary["checkpoints"]
    assert Path(checkpoint["saved_models"]["saved_model"], "saved_model.pb").exists()

    scored = subprocess.run(
        [sys.executable, str(EXAMPLE / "score.py"), checkpoint["path"], "--rows", "1000"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "scored 1000 rows" in scored.stdout


def test_score_says_why_a_checkpoint_directory_cannot_be_scored(tmp_path, script_main):
    # Its argument handling, in this process; the test above runs the script.
    status, _, stderr = script_main(EXAMPLE / "score.py", tmp_path / "missing")
    assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert f"error: There is no checkpoint at {tmp_path / 'missing'}: no such file or directory." in stderr
