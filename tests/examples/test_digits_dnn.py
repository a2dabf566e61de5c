"""The digits example (a premade tf.compat.v1 DNNClassifier) runs in test mode through the command."""

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_dnn"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_the_premade_classifier_trains_one_batch_with_exact_macro_f1(tmp_path, example_config):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    store = str(tmp_path / "store.sqlite")
    config = example_config("digits_dnn")
    result = subprocess.run(
        [
            COMMAND,
            "--store",
            store,
            "experiment",
            "create",
            str(config),
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


def test_the_adaptive_search_config_is_valid_and_its_rungs_are_as_documented():
    from det_estimator.config import Length, load_experiment_config

    config = load_experiment_config(EXAMPLE / "adaptive.yaml")
    (bracket,) = config.searcher.asha_brackets()  # aggressive: one bracket
    # 16 epochs of 1437 records in batches of 64: 359 batches; rungs as the README says.
    unit = config.searcher.max_length.unit
    lengths = [Length(unit, length).to_batches(64, config.records_per_epoch) for length in bracket.rung_lengths]
    assert lengths == [22, 89, 359]
    assert bracket.max_trials == 16
