"""A search saved after any number of events and loaded into a new method goes on exactly as the original."""

import json

import pytest

from det_estimator.searcher import ExitedReason, SearcherError, make_search_method

GRID_SPACE = {
    "global_batch_size": 32,
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 4},
    "units": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
}
SEARCHES = {
    "single": ({"name": "single"}, None),
    "random": ({"name": "random", "max_trials": 10, "max_concurrent_trials": 3}, None),
    "grid": ({"name": "grid", "max_concurrent_trials": 4}, GRID_SPACE),
    "asha-stopping": ({"name": "adaptive_asha", "max_trials": 24, "divisor": 2, "max_concurrent_trials": 4}, None),
    "asha-promotion": (
        {"name": "adaptive_asha", "max_trials": 24, "divisor": 2, "max_concurrent_trials": 4, "stop_once": False},
        None,
    ),
    "asha-conservative": (
        {"name": "adaptive_asha", "max_trials": 20, "mode": "conservative", "smaller_is_better": False},
        None,
    ),
    "tpe": ({"name": "tpe", "max_trials": 6, "max_concurrent_trials": 2}, None),
}


def exits(request_id, hparams, length):
    """A few early exits of every kind, and a few NaN metrics, so that their state is saved too."""
    return {3: ExitedReason.INVALID_HP, 5: ExitedReason.ERRORED, 8: ExitedReason.USER_CANCELED}.get(request_id)


def metric(hparams, length):
    return float("nan") if hparams["x"] > 0.9 else (hparams["x"] - 0.3) ** 2 + 1.0 / length


@pytest.mark.parametrize("name", list(SEARCHES))
def test_resumes_after_any_number_of_events(sim, name):
    section, space = SEARCHES[name]
    config = sim.make_config(section, space, max_length=64)
    events = sim.check_resumes_everywhere(config, order=6, exit_at=exits, metric=metric)
    assert events >= (2 if name == "single" else 10)


@pytest.mark.parametrize("stop_once", [True, False], ids=["stopping", "promotion"])
def test_asha_resumes_with_ties_and_exits(sim, stop_once):
    """Coarse metrics make ties, so the order of equal entries and the exited trials must survive a resume."""
    section = {"name": "adaptive_asha", "max_trials": 40, "divisor": 2, "mode": "aggressive", "stop_once": stop_once}
    config = sim.make_config({**section, "max_concurrent_trials": 6}, max_length=16)

    def exit_at(request_id, hparams, length):
        return ExitedReason.ERRORED if request_id % 5 == 2 and length > 2 else None

    def metric(hparams, length):
        # Many NaNs: worst entries, tied with the exits, reach the top of the rungs that hold too few others.
        return float("nan") if hparams["x"] > 0.4 else round(hparams["x"], 1)

    cancel = lambda request_id: request_id % 7 == 1  # noqa: E731
    sim.check_resumes_everywhere(config, order=9, exit_at=exit_at, metric=metric, cancel_waiting=cancel)


def test_random_resumes_after_every_trial_raised_invalid_hp(sim):
    config = sim.make_config({"name": "random", "max_trials": 2, "max_concurrent_trials": 1})
    # The first trial and its 20 replacements; the cap, saved with the state, ends the search there.
    assert sim.check_resumes_everywhere(config, exit_at=lambda *_: ExitedReason.INVALID_HP) == 21


@pytest.mark.parametrize("name", list(SEARCHES))
def test_state_is_strict_json_and_loads_twice(sim, name):
    section, space = SEARCHES[name]
    config = sim.make_config(section, space, max_length=64)
    method = make_search_method(config)
    state = method.state_dict()
    method.initial_operations()
    started = json.loads(json.dumps(method.state_dict(), allow_nan=False))
    assert started != state
    method.load_state_dict(started)
    method.load_state_dict(started)
    assert method.state_dict() == started


def test_a_state_of_another_config_is_refused(sim):
    config = sim.make_config({"name": "random", "max_trials": 10})
    method = make_search_method(config)
    method.initial_operations()
    state = method.state_dict()
    other = make_search_method(sim.make_config({"name": "random", "max_trials": 11}))
    with pytest.raises(SearcherError, match="can only load a state saved by a search built from the same"):
        other.load_state_dict(state)
    other_seed = make_search_method(sim.make_config({"name": "random", "max_trials": 10}, seed=8))
    with pytest.raises(SearcherError, match="same searcher section, hyperparameters and experiment seed"):
        other_seed.load_state_dict(state)
    tpe = make_search_method(sim.make_config({"name": "tpe", "max_trials": 10}))
    with pytest.raises(SearcherError, match="This tpe search can only load"):
        tpe.load_state_dict(state)
    with pytest.raises(SearcherError):
        other.load_state_dict({"searcher": "random"})


def test_a_resumed_search_does_not_start_again(sim):
    config = sim.make_config({"name": "random", "max_trials": 10})
    method = make_search_method(config)
    method.initial_operations()
    resumed = make_search_method(config)
    resumed.load_state_dict(method.state_dict())
    with pytest.raises(SearcherError, match="initial_operations of the random search was already called"):
        resumed.initial_operations()
