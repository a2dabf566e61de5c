import math

import pytest

from det_estimator.searcher import (
    Close,
    Create,
    ExitedReason,
    RandomSearch,
    Shutdown,
    ValidateAfter,
    make_search_method,
)
from det_estimator.searcher._full_length import MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL

SPACE = {
    "global_batch_size": {"type": "categorical", "vals": [16, 32]},
    "units": {"type": "int", "minval": -3, "maxval": 4},
    "dropout": {"type": "double", "minval": 0.1, "maxval": 0.4},
    "lr": {"type": "log", "minval": -5, "maxval": -2, "base": 10},
    "scale": {"type": "log", "minval": -3, "maxval": 1, "base": 2},
    "act": {"type": "categorical", "vals": ["relu", [1, 2], {"k": "v"}]},
    "optimizer": {"name": "adam", "beta": {"type": "double", "minval": 0.8, "maxval": 0.99}},
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
}


def creates(ops):
    return [op for op in ops if isinstance(op, Create)]


def test_random_starts_max_concurrent_trials_then_one_per_closed_trial(sim):
    method = make_search_method(sim.make_config({"name": "random", "max_trials": 5, "max_concurrent_trials": 2}))
    assert isinstance(method, RandomSearch)
    ops = method.initial_operations()
    assert [type(op) for op in ops] == [Create, ValidateAfter, Create, ValidateAfter]
    assert [op.request_id for op in ops] == [0, 0, 1, 1]
    assert ops[1] == ValidateAfter(0, 6400)
    assert method.on_validation_completed(1, 0.5, 6400) == [Close(1)]
    ops = method.on_trial_closed(1)
    assert [type(op) for op in ops] == [Create, ValidateAfter] and ops[0].request_id == 2
    assert method.progress() == pytest.approx(1 / 5)


def test_zero_max_concurrent_trials_means_no_limit(sim):
    method = make_search_method(sim.make_config({"name": "random", "max_trials": 40, "max_concurrent_trials": 0}))
    assert len(creates(method.initial_operations())) == 40


def test_concurrency_is_never_exceeded_and_the_search_ends(sim):
    config = sim.make_config({"name": "random", "max_trials": 30, "max_concurrent_trials": 4})
    run = sim.simulate(config, order=3)
    assert len(run.trials) == 30
    assert run.max_running == {None: 4}
    assert run.shutdown == Shutdown(failure=False)
    assert all(trial.lengths == [6400] and trial.closed for trial in run.trials.values())


def test_same_seed_same_hyperparameters_other_seed_others(sim):
    def sampled(seed):
        method = make_search_method(sim.make_config({"name": "random", "max_trials": 8}, SPACE, seed=seed))
        return [(op.hparams, op.trial_seed) for op in creates(method.initial_operations())]

    assert sampled(5) == sampled(5)
    assert sampled(5) != sampled(6)
    assert len({seed for _, seed in sampled(5)}) == 8


def test_trial_values_come_from_the_trial_seed(sim):
    config = sim.make_config({"name": "random", "max_trials": 3}, SPACE, seed=5)
    for op in creates(make_search_method(config).initial_operations()):
        assert op.hparams == config.sample_hyperparameters(op.trial_seed)


def test_every_sampled_value_respects_its_spec(sim):
    config = sim.make_config({"name": "random", "max_trials": 600, "max_concurrent_trials": 0}, SPACE)
    samples = [op.hparams for op in creates(make_search_method(config).initial_operations())]
    assert len(samples) == 600
    for values in samples:
        assert values["global_batch_size"] in (16, 32)
        assert type(values["units"]) is int and -3 <= values["units"] <= 4
        assert type(values["dropout"]) is float and 0.1 <= values["dropout"] <= 0.4
        assert 1e-5 * (1 - 1e-12) <= values["lr"] <= 1e-2 * (1 + 1e-12)
        assert -3 - 1e-9 <= math.log2(values["scale"]) <= 1 + 1e-9
        assert values["act"] in ("relu", [1, 2], {"k": "v"})
        assert values["optimizer"]["name"] == "adam" and 0.8 <= values["optimizer"]["beta"] <= 0.99
    assert {values["units"] for values in samples} == set(range(-3, 5))
    assert len({str(values["act"]) for values in samples}) == 3
    # Log values are uniform in the exponent: about a third of 10**U(-5, -2) lies below 10**-4.
    assert 150 < sum(values["lr"] < 1e-4 for values in samples) < 250


def test_invalid_hp_trials_are_replaced_and_do_not_count(sim):
    config = sim.make_config({"name": "random", "max_trials": 6, "max_concurrent_trials": 3})

    def exit_at(request_id, hparams, length):
        return ExitedReason.INVALID_HP if request_id % 2 else None

    run = sim.simulate(config, exit_at=exit_at)
    finished = [trial for trial in run.trials.values() if trial.closed]
    assert len(finished) == 6
    assert sum(trial.exited is ExitedReason.INVALID_HP for trial in run.trials.values()) == len(run.trials) - 6
    assert run.shutdown == Shutdown(failure=False)


@pytest.mark.parametrize("reason", [ExitedReason.ERRORED, ExitedReason.USER_CANCELED])
def test_other_exits_count_toward_max_trials(sim, reason):
    config = sim.make_config({"name": "random", "max_trials": 6, "max_concurrent_trials": 3})
    run = sim.simulate(config, exit_at=lambda request_id, *_: reason if request_id < 4 else None)
    assert len(run.trials) == 6
    assert [trial.exited for trial in run.trials.values()] == [reason] * 4 + [None] * 2
    assert run.shutdown == Shutdown(failure=False)


def test_every_trial_failing_fails_the_search(sim):
    config = sim.make_config({"name": "random", "max_trials": 3})
    run = sim.simulate(config, exit_at=lambda *_: ExitedReason.ERRORED)
    assert run.shutdown == Shutdown(failure=True)


def test_invalid_hp_replacements_are_bounded_and_the_search_then_ends_saying_why(sim):
    config = sim.make_config({"name": "random", "max_trials": 2, "max_concurrent_trials": 1})
    run = sim.simulate(config, exit_at=lambda *_: ExitedReason.INVALID_HP)
    # The first trial, its 20 replacements, and no trial after the InvalidHP the cap refuses to replace.
    assert len(run.trials) == 1 + 2 * MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL
    assert run.shutdown.failure
    assert "raised InvalidHP more than the 20 times it replaces them (10 per trial of max_trials 2)" in (
        run.shutdown.reason
    )


def test_a_search_that_reaches_the_cap_after_a_trial_completed_ends_without_failing(sim):
    config = sim.make_config({"name": "random", "max_trials": 2, "max_concurrent_trials": 1})
    run = sim.simulate(config, exit_at=lambda request_id, *_: ExitedReason.INVALID_HP if request_id else None)
    assert run.trials[0].closed and len(run.trials) == 2 + 2 * MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL
    assert not run.shutdown.failure and "ended early" in run.shutdown.reason
