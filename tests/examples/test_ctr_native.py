"""The native-API click-through-rate script, in local test mode and as a tracked experiment."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ctr_native" / "train.py"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def run_script(tmp_path, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DET_ESTIMATOR_STORE=str(tmp_path / "store.sqlite"))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )


def test_local_test_mode_trains_one_batch_in_the_scripts_process(tmp_path, example_config):
    result = run_script(tmp_path, "--local", "--test", "--config", str(example_config("ctr_native")))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COMPLETED after 1 batches" in result.stdout
    checkpoint = Path(re.search(r"checkpoint after 1 batches: (.+)", result.stdout).group(1))
    assert checkpoint.parent.parent.parent == tmp_path  # the config's checkpoint storage
    assert (checkpoint / "raw" / "saved_model.pb").exists()
    # A local run is recorded in the store too, so the command lists and describes it.
    listed = subprocess.run(
        [COMMAND, "--store", str(tmp_path / "store.sqlite"), "experiment", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (experiment,) = json.loads(listed.stdout)
    assert experiment["name"] == "ctr-native" and experiment["state"] == "COMPLETED"


def test_without_local_the_script_becomes_a_tracked_experiment(tmp_path, example_config):
    result = run_script(tmp_path, "--test", "--config", str(example_config("ctr_native")))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Created experiment 1" in result.stdout and "Experiment 1 COMPLETED after 1 batches." in result.stdout
    listed = subprocess.run(
        [COMMAND, "--store", str(tmp_path / "store.sqlite"), "experiment", "describe", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    experiment = json.loads(listed.stdout)
    assert experiment["command"][:2] == ["python3", str(SCRIPT)] and experiment["slots"] == 1
    (trial,) = experiment["trials"]
    assert [v["batches"] for v in trial["validations"]] == [1]
    assert "auc" in trial["validations"][0]["metrics"]
    assert experiment["checkpoints"][0]["path"].startswith(str(tmp_path / "experiment-1"))


def test_the_help_does_not_say_a_local_run_bypasses_the_store(script_main):
    # A local run is recorded in the store (the test above lists it); the help said otherwise.
    status, stdout, stderr = script_main(SCRIPT, "--help")  # in this process: what argparse prints
    assert status == 0, stderr[-3000:]
    assert "without the store" not in stdout
    assert "train in this process (recorded in the store too)" in stdout
