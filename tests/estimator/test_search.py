"""A hyperparameter search over EstimatorTrials, through the command: each trial follows its own closed form."""

import pytest


def test_a_grid_search_of_estimator_trials_runs_them_side_by_side_each_to_its_closed_form(
    analytic, search_of, tmp_path
):
    config = analytic.make_config(tmp_path, 10)
    config["hyperparameters"]["learning_rate"] = {"type": "categorical", "vals": [0.01, 0.02]}
    config["searcher"] = {**config["searcher"], "name": "grid", "max_concurrent_trials": 2}
    described = search_of(config, ("analytic_trial.py", "analytic_closed_form.py"), slots=2)
    assert described["state"] == "COMPLETED"
    trials = described["trials"]
    assert sorted(trial["hparams"]["learning_rate"] for trial in trials) == [0.01, 0.02]
    for trial in trials:
        rate = trial["hparams"]["learning_rate"]
        assert trial["state"] == "COMPLETED" and trial["validations"]
        for validation in trial["validations"]:
            expected = analytic.expected_weight(validation["batches"], rate, 8)
            assert validation["metrics"]["weight"] == pytest.approx(expected, rel=1e-5)
    runs = [(run["started_at"], run["ended_at"]) for trial in trials for run in trial["runs"]]
    assert max(start for start, _ in runs) < min(end for _, end in runs), "the two trials ran at the same time"


def test_an_estimator_trial_that_stops_itself_completes_its_search_operation_with_its_last_validation(
    analytic, search_of, tmp_path
):
    # A trial that decides to stop (a RunHook's request_stop()) has finished, as in the reference
    # system: the search closes it with the metric of the validation it made before
    # stopping, as if it had trained to max_length; it is not an error or an early exit.
    config = analytic.make_config(tmp_path, 20)
    # A search of one trial: whether the search closes it or not is what this is about.
    config["hyperparameters"]["learning_rate"] = {"type": "categorical", "vals": [0.01]}
    config["hyperparameters"]["stop_at_batch"] = 7
    config["searcher"] = {**config["searcher"], "name": "grid", "max_concurrent_trials": 1}
    described = search_of(config, ("analytic_trial.py", "analytic_closed_form.py"))
    assert described["state"] == "COMPLETED" and len(described["trials"]) == 1
    for trial in described["trials"]:
        assert (trial["state"], trial["search_state"]) == ("COMPLETED", "CLOSED")
        assert [validation["batches"] for validation in trial["validations"]] == [5, 7]
        assert trial["reported_length"] == 20  # the operation, to max_length, completed
        assert trial["best_validation"]["value"] == trial["validations"][-1]["metrics"]["loss"]
