"""The tables ``experiment describe`` and ``trial describe`` print."""

import json
import subprocess
import sys
from pathlib import Path

from det_estimator.store import ExperimentStore, MetricKind

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment  # noqa: E402

COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_the_batches_a_callback_also_reports_as_a_metric_are_not_a_second_batches_column(tmp_path):
    store = record_one_experiment(tmp_path)
    with ExperimentStore(store) as opened:
        (trial,) = opened.trials(1)
        run_id = opened.start_run(trial.id)
        for batches in (4, 8):  # what DeterminedCallback reports at each epoch's end
            metrics = {"batches": batches, "epochs": batches // 4, "loss": 1.0 / batches}
            opened.record_metrics(trial.id, MetricKind.VALIDATION, batches, metrics, run_id)
    for command in (["trial", "describe", "1"], ["experiment", "describe", "1"]):
        result = subprocess.run([COMMAND, "--store", str(store), *command], capture_output=True, text=True)
        output = result.stdout
        assert result.returncode == 0, result.stderr
        lines = output.splitlines()
        header = lines[lines.index("Validations:") + 1]
        assert header.split() == ["BATCHES", "EPOCHS", "LOSS"], output
        assert lines[lines.index("Validations:") + 3].split() == ["8", "2", "0.125"], output


def test_a_trial_that_never_started_is_said_to_be_not_started_not_0_of_a_question_mark(tmp_path):
    store = record_one_experiment(tmp_path)  # its trial has no run yet: no length is known

    def shown(*command: str) -> str:
        result = subprocess.run([COMMAND, "--store", str(store), *command], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert "/?" not in result.stdout, result.stdout
        return result.stdout

    assert "0 (not started)" in shown("experiment", "list")
    for command in (["experiment", "describe", "1"], ["trial", "describe", "1"]):
        assert "), 0 batches (training not started), seed " in shown(*command)

    with ExperimentStore(store) as opened:  # a script training to a length of its own: its batches alone
        opened.start_run(1)
        opened.set_progress(1, 7)
    assert "), 7 batches, seed " in shown("trial", "describe", "1")
    (row,) = [line for line in shown("experiment", "list").splitlines() if line.split()[0] == "1"]
    assert row.split()[4] == "7", row
    with ExperimentStore(store) as opened:
        opened.set_progress(1, 7, 20)
    assert "), 7/20 batches, seed " in shown("trial", "describe", "1")


def test_checkpoint_list_shows_the_trial_and_which_checkpoints_are_the_best_and_the_latest(tmp_path):
    store = record_one_experiment(tmp_path)  # searcher metric: loss, smaller is better
    losses = {"early": (2, 0.5), "best": (4, 0.1), "last": (6, 0.3), "gone": (3, 0.05)}
    with ExperimentStore(store) as opened:
        (trial,) = opened.trials(1)
        for uuid, (batches, loss) in losses.items():
            opened.record_checkpoint(trial.id, uuid, batches, str(tmp_path / uuid), 10, {})
            opened.record_checkpoint_validation(uuid, {"loss": loss})
        opened.mark_checkpoints_deleted(["gone"])  # the best value, but no longer on disk

    def listed(*options: str) -> str:
        result = subprocess.run(
            [COMMAND, "--store", str(store), "checkpoint", "list", "1", *options], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    lines = listed("--all").splitlines()
    assert lines[0].split()[:6] == ["UUID", "TRIAL", "BATCHES", "STATE", "KEPT", "AS"], lines[0]
    kept_as = {line.split()[0]: (line.split()[1], line.split()[4]) for line in lines[1:]}
    assert kept_as == {
        "early": (str(trial.id), "-"),
        "gone": (str(trial.id), "-"),
        "best": (str(trial.id), "best"),
        "last": (str(trial.id), "latest"),
    }
    as_json = {entry["uuid"]: entry["kept_as"] for entry in json.loads(listed("--json"))}
    assert as_json == {"early": [], "best": ["best"], "last": ["latest"]}


def test_a_search_of_one_trial_so_far_lists_the_batches_of_all_its_trials_not_that_trial_s_length(tmp_path):
    store = tmp_path / "store.sqlite"
    with ExperimentStore(store) as opened:  # one trial at a time: only the first is recorded yet
        config = {"searcher": {"name": "random", "metric": "loss", "max_trials": 4, "max_concurrent_trials": 1}}
        experiment_id = opened.create_experiment("search", config, str(tmp_path), "model_def:Trial", 1, False)
        trial_id = opened.create_trial(experiment_id, {}, 0, tmp_path / "checkpoints")
        opened.start_run(trial_id)
        opened.set_progress(trial_id, 7, 20)
    result = subprocess.run([COMMAND, "--store", str(store), "experiment", "list"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.split()[0] == str(experiment_id)]
    assert row.split()[4] == "7", result.stdout
