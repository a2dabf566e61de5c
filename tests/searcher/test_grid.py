import itertools

import pytest

from det_estimator.config import ConfigError
from det_estimator.searcher import Create, ExitedReason, GridSearch, Shutdown, make_search_method

SPACE = {
    "global_batch_size": {"type": "int", "minval": 16, "maxval": 64, "count": 2},
    "lr": {"type": "log", "minval": -4, "maxval": -2, "base": 10, "count": 3},
    "model": {
        "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5, "count": 3},
        "act": {"type": "categorical", "vals": ["relu", "tanh"]},
        "layers": [64, 32],
    },
    "x": {"type": "const", "val": 0.3},
}
EXPECTED = [
    {"global_batch_size": gbs, "lr": lr, "model": {"dropout": dropout, "act": act, "layers": [64, 32]}, "x": 0.3}
    for gbs, lr, dropout, act in itertools.product(
        [16, 64], [10.0**-4, 10.0**-3, 10.0**-2], [0.0, 0.25, 0.5], ["relu", "tanh"]
    )
]


def test_grid_visits_exactly_the_product_in_order(sim):
    config = sim.make_config({"name": "grid", "max_concurrent_trials": 5}, SPACE)
    run = sim.simulate(config, order=11)
    assert isinstance(run.method, GridSearch)
    assert len(run.trials) == 2 * 3 * 3 * 2
    visited = [run.trials[request_id].hparams for request_id in sorted(run.trials)]
    assert visited == EXPECTED
    assert run.max_running == {None: 5}
    assert run.shutdown == Shutdown(failure=False)
    assert len({trial.seed for trial in run.trials.values()}) == len(run.trials)


def test_initial_trials_and_unlimited_concurrency(sim):
    limited = make_search_method(sim.make_config({"name": "grid", "max_concurrent_trials": 4}, SPACE))
    assert sum(isinstance(op, Create) for op in limited.initial_operations()) == 4
    default = make_search_method(sim.make_config({"name": "grid"}, SPACE))
    assert sum(isinstance(op, Create) for op in default.initial_operations()) == 16
    unlimited = make_search_method(sim.make_config({"name": "grid", "max_concurrent_trials": 0}, SPACE))
    assert sum(isinstance(op, Create) for op in unlimited.initial_operations()) == 36


def test_an_exited_point_is_not_replaced(sim):
    config = sim.make_config({"name": "grid", "max_concurrent_trials": 2}, SPACE)
    run = sim.simulate(config, exit_at=lambda request_id, *_: ExitedReason.INVALID_HP if request_id == 3 else None)
    assert len(run.trials) == 36
    assert run.trials[3].exited is ExitedReason.INVALID_HP
    assert run.shutdown == Shutdown(failure=False)


def test_a_grid_over_a_range_without_count_is_refused(sim):
    space = {"global_batch_size": 32, "lr": {"type": "double", "minval": 0.1, "maxval": 0.2}}
    with pytest.raises(ConfigError) as error:
        make_search_method(sim.make_config({"name": "grid"}, space))
    assert str(error.value) == (
        "experiment config: missing required key `hyperparameters.lr.count`, which must be a positive integer: "
        "the number of values the grid searcher tries for this hyperparameter."
    )


def test_a_grid_of_constants_is_one_trial(sim):
    run = sim.simulate(
        sim.make_config({"name": "grid"}, {"global_batch_size": 32, "act": "relu"}), metric=lambda *_: 1.0
    )
    assert [trial.hparams for trial in run.trials.values()] == [{"global_batch_size": 32, "act": "relu"}]
