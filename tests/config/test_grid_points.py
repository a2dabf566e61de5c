import itertools

import pytest

from det_estimator.config import (
    CategoricalHyperparameter,
    ConfigError,
    ConstHyperparameter,
    DoubleHyperparameter,
    IntHyperparameter,
    LogHyperparameter,
    grid_point,
    grid_size,
    load_experiment_config,
)
from det_estimator.config._experiment_config import MAX_GRID_TRIALS


def space(**hyperparameters):
    raw = {
        "entrypoint": "m:T",
        "searcher": {"name": "single", "metric": "auc", "max_length": {"batches": 10}},
        "hyperparameters": {"global_batch_size": 16, **hyperparameters},
    }
    return load_experiment_config(raw).hyperparameters


@pytest.mark.parametrize(
    ("spec", "points"),
    [
        (IntHyperparameter(1, 5, 3), (1, 3, 5)),
        (IntHyperparameter(0, 10, 4), (0, 3, 7, 10)),  # 10/3 and 20/3 rounded
        (IntHyperparameter(0, 3, 3), (0, 2, 3)),  # 1.5 rounds away from zero, as the reference (Go) does
        (IntHyperparameter(-3, 0, 3), (-3, -2, 0)),  # -1.5 too
        (IntHyperparameter(1, 3, 10), (1, 2, 3)),  # count capped at maxval - minval + 1
        (IntHyperparameter(1, 4, 1), (3,)),  # the midpoint, 2.5, rounded
        (IntHyperparameter(-4, -1, 1), (-3,)),
        (IntHyperparameter(7, 7, 5), (7,)),
        (DoubleHyperparameter(0.0, 1.0, 5), (0.0, 0.25, 0.5, 0.75, 1.0)),
        (DoubleHyperparameter(0.1, 0.7, 3), (0.1, 0.4, 0.7)),
        (DoubleHyperparameter(0.2, 0.6, 1), (0.4,)),
        (LogHyperparameter(-4.0, -1.0, 10.0, 4), (1e-4, 1e-3, 1e-2, 1e-1)),
        (LogHyperparameter(-3.0, 1.0, 2.0, 3), (0.125, 0.5, 2.0)),
        (LogHyperparameter(-4.0, -2.0, 10.0, 1), (1e-3,)),
        (CategoricalHyperparameter(("relu", (1, 2))), ("relu", (1, 2))),
        (ConstHyperparameter(0.9), (0.9,)),
    ],
)
def test_grid_points_of_each_spec(spec, points):
    if isinstance(spec, (DoubleHyperparameter, LogHyperparameter)):
        assert spec.grid_points() == pytest.approx(points, rel=1e-15, abs=0)
    else:
        assert spec.grid_points() == points


def test_double_grid_ends_are_exactly_the_bounds():
    points = DoubleHyperparameter(0.1, 0.3, 7).grid_points()
    assert (points[0], points[-1]) == (0.1, 0.3)
    assert len(points) == 7


def test_range_without_count_has_no_grid():
    with pytest.raises(ValueError, match="needs the count of every int, double and log hyperparameter"):
        DoubleHyperparameter(0.0, 1.0).grid_points()


def test_grid_is_the_product_with_the_last_hyperparameter_fastest():
    hyperparameters = space(
        units={"type": "int", "minval": 1, "maxval": 3, "count": 2},
        optimizer={"lr": {"type": "log", "minval": -2, "maxval": -1, "base": 10, "count": 2}, "name": "adam"},
        act={"type": "categorical", "vals": ["relu", ["gelu", 1]]},
    )
    assert grid_size(hyperparameters) == 8
    points = [grid_point(hyperparameters, index) for index in range(8)]
    expected = [
        {"global_batch_size": 16, "units": units, "optimizer": {"lr": lr, "name": "adam"}, "act": act}
        for units, lr, act in itertools.product([1, 3], [0.01, 0.1], ["relu", ["gelu", 1]])
    ]
    assert points == expected
    points[1]["act"].append(2)  # a fresh, mutable copy each time
    assert grid_point(hyperparameters, 1)["act"] == ["gelu", 1]


def test_names_with_dots_stay_apart():
    hyperparameters = space(**{"a.b": {"type": "int", "minval": 0, "maxval": 1, "count": 2}, "a": {"b": 5}})
    assert grid_point(hyperparameters, 1) == {"global_batch_size": 16, "a.b": 1, "a": {"b": 5}}


def test_grid_point_index_out_of_range():
    hyperparameters = space(units={"type": "int", "minval": 1, "maxval": 3, "count": 3})
    with pytest.raises(IndexError, match="must be an integer from 0 to 2. Received: 3"):
        grid_point(hyperparameters, 3)


def test_a_range_without_count_is_named():
    hyperparameters = space(optimizer={"lr": {"type": "double", "minval": 0.1, "maxval": 0.2}})
    with pytest.raises(ConfigError) as error:
        grid_size(hyperparameters)
    assert str(error.value) == (
        "experiment config: missing required key `hyperparameters.optimizer.lr.count`, which must be a positive "
        "integer: the number of values the grid searcher tries for this hyperparameter."
    )


@pytest.mark.timeout(20)  # listing the axes' points instead would take hours
def test_a_grid_of_long_axes_gives_its_size_and_points_without_listing_them():
    # Counts of a million a hyperparameter are a grid no one finishes, but the command
    # must still say at once what it is, not hang before the first trial.
    hyperparameters = space(
        lr={"type": "log", "minval": -6, "maxval": -1, "base": 10, "count": 10**6},
        units={"type": "int", "minval": 0, "maxval": 10**12, "count": 10**6},
        dropout={"type": "double", "minval": 0.0, "maxval": 0.5, "count": 10**6},
    )
    assert grid_size(hyperparameters) == 10**18
    last = grid_point(hyperparameters, 10**18 - 1)
    assert (last["lr"], last["units"], last["dropout"]) == (pytest.approx(0.1, rel=1e-15), 10**12, 0.5)
    # Point 1 differs from point 0 in the last axis only, by one step.
    assert grid_point(hyperparameters, 1)["dropout"] == 0.5 / (10**6 - 1)
    assert grid_point(hyperparameters, 10**6)["units"] == 1_000_001  # 10**12 / 999,999, rounded


@pytest.mark.parametrize(
    "spec",
    [
        IntHyperparameter(-7, 30, 9),
        IntHyperparameter(0, 3, 3),
        DoubleHyperparameter(0.1, 0.7, 6),
        LogHyperparameter(-4.0, 2.0, 3.0, 5),
        CategoricalHyperparameter(("a", 1, (2, 3))),
    ],
)
def test_each_grid_point_alone_is_the_same_as_in_the_list(spec):
    assert spec.grid_count() == len(spec.grid_points())
    assert tuple(spec.grid_point_at(position) for position in range(spec.grid_count())) == spec.grid_points()


def grid_config(**hyperparameters):
    return {
        "entrypoint": "m:T",
        "searcher": {"name": "grid", "metric": "auc", "max_length": {"batches": 10}},
        "hyperparameters": {"global_batch_size": 16, **hyperparameters},
    }


def test_a_grid_of_at_most_the_limit_is_accepted():
    raw = grid_config(
        units={"type": "int", "minval": 1, "maxval": 1000, "count": MAX_GRID_TRIALS // 2},
        act={"type": "categorical", "vals": ["relu", "tanh"]},
    )
    assert grid_size(load_experiment_config(raw).hyperparameters) == MAX_GRID_TRIALS


@pytest.mark.timeout(20)  # a grid listed or run would take forever: the config must refuse it at once
def test_a_grid_of_more_trials_than_the_limit_is_refused_saying_how_many_and_what_to_do():
    raw = grid_config(**{f"h{i}": {"type": "int", "minval": 0, "maxval": 1000, "count": 100} for i in range(10)})
    raw["hyperparameters"]["optimizer"] = {
        "name": "adam",
        "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10, "count": 3},
    }
    with pytest.raises(ConfigError) as error:
        load_experiment_config(raw)
    message = str(error.value)
    assert message.startswith(
        "experiment config: the grid search would create 300,000,000,000,000,000,000 trials, one per combination "
        "of the hyperparameters' values: 100 (hyperparameters.h0) x 100 (hyperparameters.h1) x "
    )
    assert "x 3 (hyperparameters.optimizer.lr). A grid search may create at most 2,000 trials." in message
    assert "Give fewer values" in message and "`searcher.name: random`" in message
    assert "global_batch_size" not in message  # one value: no factor of the product


def test_the_grid_limit_counts_an_int_range_as_the_values_it_has():
    # A count above the range's size tries each integer once: 11 values, not a million.
    raw = grid_config(units={"type": "int", "minval": 0, "maxval": 10, "count": 10**6})
    assert grid_size(load_experiment_config(raw).hyperparameters) == 11
