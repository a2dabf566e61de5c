import math

from det_estimator.config import load_experiment_config

SEARCHER = {"name": "single", "metric": "auc", "max_length": {"batches": 10}}


def config_with(**hyperparameters):
    raw = {"entrypoint": "m:T", "searcher": SEARCHER, "hyperparameters": {"global_batch_size": 16, **hyperparameters}}
    return load_experiment_config(raw)


RANGES = config_with(
    units={"type": "int", "minval": 3, "maxval": 9},
    dropout={"type": "double", "minval": 0.1, "maxval": 0.4},
    lr={"type": "log", "minval": -5, "maxval": -2, "base": 10},
    act={"type": "categorical", "vals": ["relu", "gelu", "tanh"]},
)


def test_sampling_is_deterministic_for_a_seed():
    assert RANGES.sample_hyperparameters(7) == RANGES.sample_hyperparameters(7)


def test_different_seeds_give_different_values():
    assert RANGES.sample_hyperparameters(1) != RANGES.sample_hyperparameters(2)
    assert len({RANGES.sample_hyperparameters(seed)["dropout"] for seed in range(20)}) == 20


def test_values_stay_within_bounds():
    seen_units = set()
    for seed in range(300):
        values = RANGES.sample_hyperparameters(seed)
        assert values["global_batch_size"] == 16
        assert isinstance(values["units"], int) and 3 <= values["units"] <= 9
        assert 0.1 <= values["dropout"] <= 0.4
        assert 10**-5 <= values["lr"] <= 10**-2
        assert values["act"] in ("relu", "gelu", "tanh")
        seen_units.add(values["units"])
    assert seen_units == set(range(3, 10))


def test_log_values_are_powers_of_the_base():
    config = config_with(lr={"type": "log", "minval": -3, "maxval": 1, "base": 2})
    exponents = [math.log2(config.sample_hyperparameters(seed)["lr"]) for seed in range(200)]
    assert all(-3 - 1e-9 <= exponent <= 1 + 1e-9 for exponent in exponents)
    # Uniform in the exponent, not in the value: about half the draws lie below 2 ** -1.
    assert 60 < sum(exponent < -1 for exponent in exponents) < 140


def test_nested_groups_give_nested_dicts():
    config = config_with(
        optimizer={"name": "adam", "lr": {"type": "double", "minval": 0.5, "maxval": 0.6}, "betas": [0.9, 0.99]},
        schedule={"type": "const", "val": {"warmup": 100}},
    )
    values = config.sample_hyperparameters(3)
    assert set(values) == {"global_batch_size", "optimizer", "schedule"}
    assert values["optimizer"]["name"] == "adam"
    assert 0.5 <= values["optimizer"]["lr"] <= 0.6
    assert values["optimizer"]["betas"] == [0.9, 0.99]
    assert values["schedule"] == {"warmup": 100}


def test_sampled_values_are_fresh_copies():
    config = config_with(layers=[64, 32])
    config.sample_hyperparameters(0)["layers"].append(16)
    assert config.sample_hyperparameters(0)["layers"] == [64, 32]


def test_adding_a_hyperparameter_leaves_the_others_unchanged():
    hyperparameters = RANGES.to_dict()["hyperparameters"]
    more = config_with(extra={"type": "double", "minval": 0, "maxval": 1}, **hyperparameters)
    values = more.sample_hyperparameters(11)
    del values["extra"]
    assert values == RANGES.sample_hyperparameters(11)


def test_global_batch_size_from_an_int_range_or_categorical():
    config = config_with(global_batch_size={"type": "categorical", "vals": [32, 64]})
    assert {config.sample_hyperparameters(seed)["global_batch_size"] for seed in range(50)} == {32, 64}
    config = config_with(global_batch_size={"type": "int", "minval": 8, "maxval": 9})
    assert {config.sample_hyperparameters(seed)["global_batch_size"] for seed in range(50)} == {8, 9}
