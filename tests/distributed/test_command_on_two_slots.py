"""The det-estimator command with two processes: a rank that dies, and the checkpoint it leaves."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import det_estimator as det

SUPPORT = Path(__file__).resolve().parents[1] / "support"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
LEARNING_RATE, GLOBAL_BATCH = 0.01, 8


def det_command(runs, tmp_path, *args, timeout=240):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        [COMMAND, "--store", str(tmp_path / "store.sqlite"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    output = runs.communicate_or_kill(process, timeout, f"det-estimator {' '.join(args)}")
    return process.returncode, output


# A failing rank ending the job fast is in the default path (tests/distributed/test_trial_controller.py).
@pytest.mark.slow
def test_a_rank_that_dies_fails_the_experiment_and_leaves_a_usable_checkpoint(analytic, runs, tmp_path):
    context_dir = tmp_path / "code"
    context_dir.mkdir()
    shutil.copy(SUPPORT / "analytic_trial.py", context_dir)
    shutil.copy(SUPPORT / "analytic_closed_form.py", context_dir)
    config = analytic.make_config(tmp_path, 20)
    config["checkpoint_storage"]["host_path"] = "checkpoints"
    # Rank 1 raises at its 12th batch: after the checkpoint at 10 batches, before the next one.
    config["hyperparameters"]["crash"] = {"rank": 1, "batch": 12}
    (context_dir / "experiment.yaml").write_text(yaml.safe_dump(config))

    status, output = det_command(
        runs, tmp_path, "experiment", "create", str(context_dir / "experiment.yaml"), str(context_dir), "--slots", "2"
    )
    assert status == 1, output[-3000:]
    assert "RuntimeError: rank 1 crashed at its batch 12 of this run" in output  # the dead rank's traceback
    assert "Experiment 1 failed (ERROR)" in output
    assert f"det-estimator --store {tmp_path / 'store.sqlite'} trial logs 1" in output
    status, listed = det_command(runs, tmp_path, "experiment", "list", "--json")
    (experiment,) = json.loads(listed)
    assert experiment["state"] == "ERROR" and experiment["batches_trained"] == 10

    status, listed = det_command(runs, tmp_path, "checkpoint", "list", "1", "--json")
    latest = json.loads(listed)[-1]
    assert latest["batches"] == 10
    model = det.load_estimator_from_checkpoint_path(latest["path"], serving_name="raw")
    prediction = model.signatures["serving_default"](x=analytic.tf.constant([2.0]))
    expected = analytic.expected_weight(10, LEARNING_RATE, GLOBAL_BATCH)
    assert float(next(iter(prediction.values())).numpy()[0]) == pytest.approx(2.0 * expected, rel=1e-5)

    # Resumed, the job restarts from that checkpoint (rank 1's batch count starts over, so
    # it does not reach 12 again) and ends where an uninterrupted run would.
    status, output = det_command(runs, tmp_path, "experiment", "resume", "1", "--json")
    assert status == 0, output[-3000:]
    status, described = det_command(runs, tmp_path, "experiment", "describe", "1", "--json")
    experiment = json.loads(described)
    assert experiment["state"] == "COMPLETED"
    final = experiment["trials"][0]["validations"][-1]
    assert final["batches"] == 20
    assert final["metrics"]["weight"] == pytest.approx(
        analytic.expected_weight(20, LEARNING_RATE, GLOBAL_BATCH), rel=1e-5
    )


def test_a_reducer_failing_on_one_rank_shows_its_error_and_frames_once(analytic, runs, tmp_path):
    context_dir = tmp_path / "code"
    context_dir.mkdir()
    shutil.copy(SUPPORT / "analytic_trial.py", context_dir)
    shutil.copy(SUPPORT / "analytic_closed_form.py", context_dir)
    config = analytic.make_config(tmp_path, 5, max_restarts=0)
    config["hyperparameters"]["failing_reducer_rank"] = 1
    (context_dir / "experiment.yaml").write_text(yaml.safe_dump(config))

    status, output = det_command(
        runs, tmp_path, "experiment", "create", str(context_dir / "experiment.yaml"), str(context_dir), "--slots", "2"
    )
    assert status == 1, output[-3000:]
    shown = output[output.index("Trial 1 failed") : output.index("Experiment 1 failed")]
    # The failing rank, the metric and the reducer's method, then the user's own frames and exception.
    assert shown.startswith("Trial 1 failed on rank 1 in metric 'flaky' (FailingReducer.accumulate):\n"), shown
    assert 'analytic_trial.py", line' in shown and "in accumulate" in shown
    assert shown.rstrip().endswith("ValueError: cannot score this batch on rank 1"), shown
    # Not TensorFlow's end of input, nor det-estimator's own frames; and shown once.
    assert "OutOfRangeError" not in shown and "det_estimator" not in shown, shown
    assert output.count("Trial 1 failed") == 1 and output.count("ValueError: cannot score") == 1, output[-3000:]
