"""The examples on two processes: the native script launched as a tracked experiment, and
the README's main job (example 1, in full) through the det-estimator command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def start(tmp_path, command, stderr=subprocess.STDOUT):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(tmp_path / "store.sqlite"))
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, start_new_session=True)


def describe(tmp_path, experiment_id: int) -> dict:
    result = subprocess.run(
        [COMMAND, "--store", str(tmp_path / "store.sqlite"), "experiment", "describe", str(experiment_id), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(result.stdout)


def test_the_native_script_runs_on_two_launched_ranks(runs, tmp_path, example_config):
    script = EXAMPLES / "ctr_native" / "train.py"
    config = example_config("ctr_native", "distributed.yaml")
    process = start(tmp_path, [sys.executable, str(script), "--test", "--config", str(config)])
    output = runs.communicate_or_kill(process, 240, "the native script on 2 slots")
    assert process.returncode == 0, output[-5000:]
    experiment = describe(tmp_path, 1)
    assert (experiment["state"], experiment["slots"]) == ("COMPLETED", 2)
    (trial,) = experiment["trials"]
    assert trial["batches_trained"] == 1 and "auc" in trial["validations"][0]["metrics"]


@pytest.mark.slow
def test_the_main_job_trains_example_one_in_full_on_two_slots(runs, tmp_path, example_config):
    config = example_config("ctr_binary", "distributed.yaml")
    progress = tmp_path / "progress.txt"
    with progress.open("w") as stderr:
        process = start(
            tmp_path, [COMMAND, "experiment", "create", str(config), str(EXAMPLES / "ctr_binary"), "--json"], stderr
        )
        output = runs.communicate_or_kill(process, 600, "example 1 on 2 slots")
    assert process.returncode == 0, progress.read_text()[-5000:]
    summary = json.loads(output)
    assert summary["state"] == "COMPLETED" and summary["batches_trained"] == summary["max_batches"] == 1600
    # Synthetic clicks from a known logistic model: a trained DNN ranks them well.
    assert summary["best_validation"]["metric"] == "auc" and summary["best_validation"]["value"] > 0.85
    assert describe(tmp_path, 1)["slots"] == 2
    kept = summary["checkpoints"][-1]
    scored = subprocess.run(
        [sys.executable, str(EXAMPLES / "ctr_binary" / "score.py"), kept["path"], "--rows", "1000"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert scored.returncode == 0 and "scored 1000 rows" in scored.stdout, scored.stderr[-3000:]
