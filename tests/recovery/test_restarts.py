"""``max_restarts``: a failed trial runs again from its latest valid checkpoint, up to that many times."""

import pytest


def final_weight(described: dict) -> tuple[int, float]:
    (trial,) = described["trials"]
    last = trial["validations"][-1]
    return last["batches"], last["metrics"]["weight"]


def test_a_failure_that_happens_once_is_survived_by_a_restart(det, context, helpers, analytic, cli, tmp_path):
    marker = tmp_path / "failed-once"
    fault = {"kind": "raise", "rank": 0, "batch": 8, "once": str(marker)}
    config = context.write_config(raw=helpers.fault_config(context, 20, fault))
    result = det.ok("experiment", "create", config, context.directory)
    assert marker.exists()  # the fault did fire
    assert "restart 1 of 5, from checkpoint " in result.stdout, result.stdout
    described = det.json("experiment", "describe", helpers.created_id(result.stdout))
    assert described["state"] == "COMPLETED"
    (trial,) = described["trials"]
    assert trial["restarts"] == 1
    (restart,) = trial["restart_causes"]
    assert restart["number"] == 1
    assert restart["cause"] == "rank 0: RuntimeError: injected failure on rank 0"
    assert [run["state"] for run in trial["runs"]] == ["ERROR", "COMPLETED"]
    assert trial["runs"][1]["start_batches"] > 0  # it went on from a checkpoint, not from the start
    batches, weight = final_weight(described)
    assert batches == 20
    assert weight == pytest.approx(helpers.closed_form_weight(analytic, cli, 20), rel=1e-5)
    shown = det.ok("experiment", "describe", helpers.created_id(result.stdout)).stdout
    assert "restarts:        1 (max_restarts 5)" in shown
    assert "1. " in shown and "rank 0: RuntimeError: injected failure on rank 0" in shown


def test_a_searcher_metric_no_validation_reports_is_not_restarted(det, context, helpers):
    raw = helpers.fault_config(context, 20, max_restarts=5)
    raw["searcher"]["metric"] = "lss"
    result = det("experiment", "create", context.write_config(raw=raw), context.directory)
    assert result.returncode == 2, result.stdout + result.stderr  # bad input, as a config refused at once
    assert "searcher.metric 'lss' is not among the validation metrics" in result.stderr
    assert "not restarted: the experiment config is at fault" in result.stdout, result.stdout
    assert "restart 1 of 5" not in result.stdout
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["state"] == "ERROR"
    assert trial["restarts"] == 0 and len(trial["runs"]) == 1


def test_a_trial_asking_for_a_hyperparameter_the_config_lacks_is_not_restarted(det, context, helpers):
    raw = helpers.fault_config(context, 20, max_restarts=5)
    del raw["hyperparameters"]["learning_rate"]
    result = det("experiment", "create", context.write_config(raw=raw), context.directory)
    assert result.returncode == 2, result.stdout + result.stderr  # bad input, as a config refused at once
    assert "Hyperparameter 'learning_rate' is not defined in the experiment config" in result.stderr
    assert "not restarted: the experiment config is at fault" in result.stdout, result.stdout
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["restarts"] == 0 and len(trial["runs"]) == 1


def test_a_trial_whose_code_det_estimator_refuses_is_not_restarted(det, context, helpers):
    raw = helpers.fault_config(context, 20, {"kind": "throttled_eval_spec"}, max_restarts=5)
    result = det("experiment", "create", context.write_config(raw=raw), context.directory)
    assert result.returncode == 1, result.stdout + result.stderr  # the code is at fault, not the input
    assert "EvalSpec(throttle_secs=10) is not used" in result.stderr
    assert "not restarted: the trial's code is at fault" in result.stdout, result.stdout
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["restarts"] == 0 and len(trial["runs"]) == 1


def test_a_failure_that_repeats_itself_is_restarted_once_and_not_again(det, context, helpers):
    fault = {"kind": "raise", "rank": 0, "batch": 3}
    config = context.write_config(raw=helpers.fault_config(context, 20, fault, max_restarts=2))
    result = det("experiment", "create", config, context.directory)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "RuntimeError: injected failure on rank 0" in result.stderr
    assert "restart 1 of 2, from the start (it has no checkpoint yet)" in result.stdout, result.stdout
    assert "not restarted: it failed as its previous run did, with the same error at the same place" in result.stdout, (
        result.stdout
    )
    assert "restart 2" not in result.stdout
    (experiment,) = det.json("experiment", "list")
    described = det.json("experiment", "describe", experiment["id"])
    assert described["state"] == "ERROR"
    (trial,) = described["trials"]
    assert trial["restarts"] == 1 and [run["state"] for run in trial["runs"]] == ["ERROR"] * 2


def test_a_failure_before_the_first_batch_is_not_restarted(det, context, helpers):
    config = context.write_config(raw=helpers.fault_config(context, 20, {"kind": "raise_at_start"}, max_restarts=5))
    result = det("experiment", "create", config, context.directory)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "RuntimeError: injected failure before the first batch" in result.stderr
    assert "not restarted: it failed before completing a batch since it started" in result.stdout, result.stdout
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["restarts"] == 0 and len(trial["runs"]) == 1


@pytest.mark.slow
def test_failures_that_differ_end_as_error_after_exactly_max_restarts(det, context, helpers, tmp_path):
    fault = {"kind": "raise_differently", "rank": 0, "batch": 3, "once": str(tmp_path / "runs")}
    config = context.write_config(raw=helpers.fault_config(context, 20, fault, max_restarts=2))
    result = det("experiment", "create", config, context.directory)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "OSError: injected failure 3 on rank 0" in result.stderr
    assert "restart 2 of 2" in result.stdout and "restart 3" not in result.stdout
    assert "its 2 restart(s) are used up" in result.stdout
    (experiment,) = det.json("experiment", "list")
    described = det.json("experiment", "describe", experiment["id"])
    assert described["state"] == "ERROR"
    (trial,) = described["trials"]
    assert trial["state"] == "ERROR"
    assert trial["restarts"] == 2
    assert [restart["number"] for restart in trial["restart_causes"]] == [1, 2]
    assert [run["state"] for run in trial["runs"]] == ["ERROR"] * 3


@pytest.mark.slow
def test_max_restarts_zero_ends_the_trial_at_its_first_failure(det, context, helpers):
    fault = {"kind": "raise", "rank": 0, "batch": 3}
    config = context.write_config(raw=helpers.fault_config(context, 20, fault, max_restarts=0))
    result = det("experiment", "create", config, context.directory)
    assert result.returncode == 1
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["restarts"] == 0 and trial["restart_causes"] == [] and len(trial["runs"]) == 1
