"""The click-through-rate example runs in test mode, and its scoring script reads the result."""

import os
import re
import subprocess
import sys
from pathlib import Path

from det_estimator.store import ExperimentStore, State

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ctr_binary"


def run(*args, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_train_in_test_mode_then_score_with_its_saved_model(tmp_path):
    trained = run(str(EXAMPLE / "train.py"), "--test", "--trial-id", "smoke", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "trial smoke: COMPLETED after 1 batches" in trained.stdout
    auc = float(re.search(r"ROC AUC ([0-9.]+)", trained.stdout).group(1))
    assert 0.0 <= auc <= 1.0
    checkpoint = re.search(r"^checkpoint after 1 batches: (.+)$", trained.stdout, re.MULTILINE).group(1)
    assert (tmp_path / checkpoint / "raw" / "saved_model.pb").exists()

    scored = run(str(EXAMPLE / "score.py"), checkpoint, "--rows", "1000", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "scored 1000 rows" in scored.stdout


# The scoring script's refusals are its argument handling: its main() runs in this process
# (an exception would fail the test as a traceback would); the test above runs it as a script.


def test_score_says_why_it_has_no_checkpoint_to_score(tmp_path, monkeypatch, script_main):
    monkeypatch.chdir(tmp_path)
    score = EXAMPLE / "score.py"
    status, _, stderr = script_main(score)
    assert status == 2
    assert "error: give either a CHECKPOINT directory or --experiment ID (or latest), one of the two" in stderr

    absent = tmp_path / "absent.sqlite"
    status, _, stderr = script_main(score, "--experiment", "latest", "--store", absent)
    assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert f"error: there is no experiment store at {absent}; name one with --store" in stderr
    assert not absent.exists()  # looking did not make an empty store there

    store = tmp_path / "store.sqlite"
    with ExperimentStore(store) as opened:  # an experiment paused before its first validation
        config = {"searcher": {"name": "single", "metric": "auc", "smaller_is_better": False}}
        experiment_id = opened.create_experiment("ctr", config, str(tmp_path), "model_def:Trial", 1, False)
        opened.set_state(experiment_id, State.PAUSED)
    status, _, stderr = script_main(score, "--experiment", "latest", "--store", store)
    assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert "error: experiment 1 has no kept checkpoint with a validation of auc yet (it is PAUSED)" in stderr
    status, _, stderr = script_main(score, "--experiment", "7", "--store", store)
    assert status == 2 and "There is no experiment 7 in the store" in stderr


def test_score_says_why_a_checkpoint_directory_cannot_be_scored(tmp_path, monkeypatch, script_main):
    monkeypatch.chdir(tmp_path)
    score = EXAMPLE / "score.py"
    status, _, stderr = script_main(score, tmp_path / "missing")
    assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert f"error: There is no checkpoint at {tmp_path / 'missing'}: no such file or directory." in stderr
    (tmp_path / "logs").mkdir()
    status, _, stderr = script_main(score, tmp_path / "logs")
    assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert "is not a checkpoint of an EstimatorTrial" in stderr


def test_score_takes_the_checkpoint_that_checkpoint_list_calls_best_the_later_of_equal_values(
    tmp_path, monkeypatch, script_main
):
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store.sqlite"
    with ExperimentStore(store) as opened:
        config = {"searcher": {"name": "single", "metric": "auc", "smaller_is_better": False}}
        experiment_id = opened.create_experiment("ctr", config, str(tmp_path), "model_def:Trial", 1, False)
        trial_id = opened.create_trial(experiment_id, {}, 0, tmp_path / "checkpoints")
        for uuid, batches, auc in [("first", 2, 0.9), ("tied", 4, 0.9), ("worse", 6, 0.8), ("nan", 8, float("nan"))]:
            opened.record_checkpoint(trial_id, uuid, batches, str(tmp_path / uuid), 1, {})
            opened.record_checkpoint_validation(uuid, {"auc": auc})
    # Scores the checkpoint it names, which does not exist here: only the choice is looked at.
    _, stdout, stderr = script_main(EXAMPLE / "score.py", "--experiment", "1", "--store", store)
    assert "experiment 1: best checkpoint tied (after 4 batches)" in stdout, stderr[-3000:]
    listed = subprocess.run(
        [str(Path(sys.executable).with_name("det-estimator")), "--store", str(store), "checkpoint", "list", "1"],
        capture_output=True,
        text=True,
    )
    assert [line.split()[0] for line in listed.stdout.splitlines() if " best" in line] == ["tied"], listed.stdout
