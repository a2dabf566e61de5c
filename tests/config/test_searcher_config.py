"""The ``searcher`` section of every searcher: defaults, round trips, ASHA's brackets, and each bad key's message."""

import json

import pytest

from det_estimator.config import AshaBracket, ConfigError, LengthUnit, SearcherConfig, load_experiment_config


def load(searcher, **top_level):
    raw = {
        "entrypoint": "model_def:MyTrial",
        "hyperparameters": {"global_batch_size": 32},
        "searcher": {"metric": "auc", "max_length": {"batches": 6400}, **searcher},
        **top_level,
    }
    return load_experiment_config(raw)


COMMON = {"metric": "auc", "smaller_is_better": True, "max_length": {"batches": 6400}}


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"name": "single"}, {"name": "single", **COMMON}),
        (
            {"name": "random", "max_trials": 20},
            {"name": "random", **COMMON, "max_trials": 20, "max_concurrent_trials": 16},
        ),
        ({"name": "grid", "max_concurrent_trials": 0}, {"name": "grid", **COMMON, "max_concurrent_trials": 0}),
        (
            {"name": "adaptive_asha", "max_trials": 64},
            {
                "name": "adaptive_asha",
                **COMMON,
                "max_trials": 64,
                "max_concurrent_trials": 16,
                "mode": "standard",
                "divisor": 4,
                "max_rungs": 5,
                "stop_once": True,
            },
        ),
        (
            {"name": "adaptive_asha", "max_trials": 64, "bracket_rungs": [2, 3], "divisor": 2.5, "stop_once": False},
            {
                "name": "adaptive_asha",
                **COMMON,
                "max_trials": 64,
                "max_concurrent_trials": 16,
                "divisor": 2.5,
                "bracket_rungs": [2, 3],
                "stop_once": False,
            },
        ),
        (
            {"name": "tpe", "max_trials": 30, "max_concurrent_trials": 2, "smaller_is_better": False},
            {"name": "tpe", **COMMON, "smaller_is_better": False, "max_trials": 30, "max_concurrent_trials": 2},
        ),
    ],
)
def test_defaults_are_filled_in_and_the_section_round_trips(section, expected):
    config = load(section)
    assert config.searcher.to_dict() == expected
    as_dict = json.loads(json.dumps(config.to_dict()))
    assert load_experiment_config(as_dict) == config


def test_null_means_default():
    searcher = load({"name": "adaptive_asha", "max_trials": 8, "mode": None, "divisor": None, "bracket_rungs": None})
    assert (searcher.searcher.mode, searcher.searcher.divisor, searcher.searcher.bracket_rungs) == ("standard", 4, None)


def test_fields_of_an_asha_section():
    searcher = load({"name": "adaptive_asha", "max_trials": 8, "bracket_rungs": [1, 3]}).searcher
    assert searcher.bracket_rungs == (1, 3)
    assert (searcher.mode, searcher.max_rungs) == (None, None)
    assert searcher.max_length.unit is LengthUnit.BATCHES
    single = load({"name": "single"}).searcher
    assert single == SearcherConfig("single", "auc", True, single.max_length)


def brackets(searcher, max_length=None, **top_level):
    section = {"name": "adaptive_asha", "max_length": max_length or {"batches": 6400}, **searcher}
    return load(section, **top_level).searcher.asha_brackets()


def test_the_reference_worked_example():
    assert brackets({"max_trials": 512}, {"batches": 6400}) == (
        AshaBracket(5, 363, 6, (25, 100, 400, 1600, 6400)),
        AshaBracket(4, 112, 5, (100, 400, 1600, 6400)),
        AshaBracket(3, 37, 5, (400, 1600, 6400)),
    )


def test_modes():
    aggressive = brackets({"max_trials": 512, "mode": "aggressive"}, {"batches": 6400})
    assert aggressive == (AshaBracket(5, 512, 16, (25, 100, 400, 1600, 6400)),)
    conservative = brackets({"max_trials": 512, "mode": "conservative"}, {"batches": 6400})
    # Weights 4**(r-1)/r: 51.2, 16, 5.33, 2, 1 of 75.53; floors 347, 108, 36, 13, 6; the 2 left go to the first.
    assert [(b.num_rungs, b.max_trials, b.max_concurrent_trials) for b in conservative] == [
        (5, 349, 4),
        (4, 108, 3),
        (3, 36, 3),
        (2, 13, 3),
        (1, 6, 3),
    ]
    assert conservative[-1].rung_lengths == (6400,)


def test_rungs_capped_by_max_trials_and_by_max_length():
    # log_4(16) is exactly 2: three rungs, not two (as a floating-point log could give).
    assert [(b.num_rungs, b.max_trials) for b in brackets({"max_trials": 16}, {"batches": 6400})] == [(3, 12), (2, 4)]
    # 4**3 <= 100 < 4**4: at most four rungs, so standard brackets of 4, 3 and 2; lengths floored.
    by_length = brackets({"max_trials": 1000}, {"batches": 100})
    assert [b.rung_lengths for b in by_length] == [(1, 6, 25, 100), (6, 25, 100), (25, 100)]
    assert brackets({"max_trials": 3}, {"batches": 100}) == (AshaBracket(1, 3, 16, (100,)),)


def test_lengths_in_other_units():
    assert brackets({"max_trials": 64, "mode": "aggressive"}, {"epochs": 16}, records_per_epoch=1000) == (
        AshaBracket(3, 64, 16, (1, 4, 16)),
    )


def test_concurrency_split():
    assert [b.max_concurrent_trials for b in brackets({"max_trials": 512, "max_concurrent_trials": 2})] == [1, 1, 1]
    assert [b.max_concurrent_trials for b in brackets({"max_trials": 512, "max_concurrent_trials": 0})] == [0, 0, 0]
    assert [b.max_concurrent_trials for b in brackets({"max_trials": 512, "max_concurrent_trials": 8})] == [3, 3, 2]


def test_bracket_rungs_replace_the_mode_largest_first():
    result = brackets({"max_trials": 100, "bracket_rungs": [2, 4]}, {"batches": 6400})
    assert [(b.num_rungs, b.rung_lengths) for b in result] == [(4, (100, 400, 1600, 6400)), (2, (1600, 6400))]
    # Weights 16 and 2: 88.9 and 11.1 of 100, floored to 88 and 11; the one left goes to the first.
    assert [b.max_trials for b in result] == [89, 11]


def test_non_integer_divisors():
    result = brackets({"max_trials": 200, "divisor": 2.5, "mode": "aggressive"}, {"batches": 100})
    assert result == (AshaBracket(5, 200, 16, (2, 6, 16, 40, 100)),)
    # Below 2, floors repeat sooner than log_d says: 4, 2.67, 1.78, 1.19 floor to 4, 2, 1, 1.
    result = brackets({"max_trials": 100, "divisor": 1.5, "mode": "aggressive"}, {"batches": 4})
    assert result == (AshaBracket(3, 100, 16, (1, 2, 4)),)


def test_brackets_of_another_searcher():
    with pytest.raises(ValueError, match="Only the adaptive_asha searcher has brackets. Received: searcher 'random'"):
        load({"name": "random", "max_trials": 2}).searcher.asha_brackets()


ASHA = {"name": "adaptive_asha", "max_trials": 16}
ASHA_KEYS = (
    "bracket_rungs, divisor, max_concurrent_trials, max_length, max_rungs, max_trials, metric, mode, name, "
    "smaller_is_better, stop_once"
)
BAD = [
    (
        "random without max_trials",
        {"name": "random"},
        "experiment config: missing required key `searcher.max_trials`, which must be a positive integer.",
    ),
    (
        "max_trials of zero",
        {"name": "tpe", "max_trials": 0},
        "experiment config: `searcher.max_trials` must be a positive integer. Received: 0 (int)",
    ),
    (
        "asha without max_trials",
        {"name": "adaptive_asha"},
        "experiment config: missing required key `searcher.max_trials`, which must be a positive integer.",
    ),
    (
        "negative max_concurrent_trials",
        {"name": "grid", "max_concurrent_trials": -1},
        "experiment config: `searcher.max_concurrent_trials` must be a non-negative integer. Received: -1 (int)",
    ),
    (
        "max_trials with grid",
        {"name": "grid", "max_trials": 4},
        "experiment config: `searcher.max_trials` is not supported by the `grid` searcher, which runs one trial per "
        "point of the grid; remove it. Received: 4 (int)",
    ),
    (
        "max_concurrent_trials with single",
        {"name": "single", "max_concurrent_trials": 2},
        "experiment config: `searcher.max_concurrent_trials` is not supported by the `single` searcher, which runs "
        "exactly one trial; remove it. Received: 2 (int)",
    ),
    (
        "divisor with single",
        {"name": "single", "divisor": 3},
        "experiment config: `searcher.divisor` is not supported by the `single` searcher, which runs exactly one "
        "trial; remove it. Received: 3 (int)",
    ),
    (
        "mode with random",
        {"name": "random", "max_trials": 4, "mode": "standard"},
        "experiment config: `searcher.mode` is not supported by the `random` searcher (only adaptive_asha takes it); "
        "remove it. Received: 'standard' (str)",
    ),
    (
        "stop_once with tpe",
        {"name": "tpe", "max_trials": 4, "stop_once": False},
        "experiment config: `searcher.stop_once` is not supported by the `tpe` searcher (only adaptive_asha takes "
        "it); remove it. Received: False (bool)",
    ),
    (
        "max_trials with grid, before an unknown key",
        {"name": "grid", "max_lenght": 1, "max_trials": 4},
        "experiment config: `searcher.max_trials` is not supported by the `grid` searcher, which runs one trial per "
        "point of the grid; remove it. Received: 4 (int)",
    ),
    (
        "unknown key with asha",
        {**ASHA, "max_steps": 100},
        f"experiment config: unknown key `searcher.max_steps`. Expected one of: {ASHA_KEYS}",
    ),
    (
        "unknown mode",
        {**ASHA, "mode": "fast"},
        "experiment config: `searcher.mode` must be one of: aggressive, conservative, standard. Received: 'fast' (str)",
    ),
    (
        "divisor of 1",
        {**ASHA, "divisor": 1},
        "experiment config: `searcher.divisor` must be a number greater than 1. Received: 1 (int)",
    ),
    (
        "divisor as a string",
        {**ASHA, "divisor": "4"},
        "experiment config: `searcher.divisor` must be a number greater than 1. Received: '4' (str)",
    ),
    (
        "divisor as a boolean",
        {**ASHA, "divisor": True},
        "experiment config: `searcher.divisor` must be a number greater than 1. Received: True (bool)",
    ),
    (
        "infinite divisor",
        {**ASHA, "divisor": float("inf")},
        "experiment config: `searcher.divisor` must be a number greater than 1. Received: inf (float)",
    ),
    (
        "max_rungs of zero",
        {**ASHA, "max_rungs": 0},
        "experiment config: `searcher.max_rungs` must be a positive integer. Received: 0 (int)",
    ),
    (
        "empty bracket_rungs",
        {**ASHA, "bracket_rungs": []},
        "experiment config: `searcher.bracket_rungs` must be a non-empty list of positive integers. "
        "Received: [] (list)",
    ),
    (
        "bracket_rungs as a number",
        {**ASHA, "bracket_rungs": 3},
        "experiment config: `searcher.bracket_rungs` must be a non-empty list of positive integers. Received: 3 (int)",
    ),
    (
        "bracket_rungs with a zero",
        {**ASHA, "bracket_rungs": [3, 0]},
        "experiment config: `searcher.bracket_rungs[1]` must be a positive integer. Received: 0 (int)",
    ),
    (
        "bracket_rungs with mode",
        {**ASHA, "mode": "standard", "bracket_rungs": [3]},
        "experiment config: `searcher.mode` cannot be combined with `searcher.bracket_rungs`, which sets the rungs "
        "of every bracket itself; remove one of them. Received: 'standard' (str)",
    ),
    (
        "bracket_rungs with max_rungs",
        {**ASHA, "bracket_rungs": [3], "max_rungs": 3},
        "experiment config: `searcher.max_rungs` cannot be combined with `searcher.bracket_rungs`, which sets the "
        "rungs of every bracket itself; remove one of them. Received: 3 (int)",
    ),
    (
        "bracket with more rungs than lengths",
        {**ASHA, "max_length": {"batches": 100}, "bracket_rungs": [3, 5]},
        "experiment config: `searcher.bracket_rungs[1]` must be an integer from 1 to 4: with max_length 100 and "
        "divisor 4, a bracket of more rungs would train two of its rungs to the same length. Received: 5 (int)",
    ),
    (
        "too few trials for the brackets",
        {**ASHA, "max_trials": 3, "max_length": {"batches": 100}, "bracket_rungs": [4, 1, 1, 1]},
        "experiment config: `searcher.max_trials` must be large enough to give each of the 4 brackets (of 4, 1, 1, "
        "1 rungs) at least one trial. Received: 3 (int)",
    ),
    (
        "stop_once not a boolean",
        {**ASHA, "stop_once": "yes"},
        "experiment config: `searcher.stop_once` must be a boolean (true or false). Received: 'yes' (str)",
    ),
]


@pytest.mark.parametrize(("section", "message"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_searcher_sections(section, message):
    with pytest.raises(ConfigError) as error:
        load(section)
    assert str(error.value) == message


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_a_nan_metric_never_improves_and_a_nan_best_is_no_best(smaller_is_better):
    searcher = load({"name": "single", "smaller_is_better": smaller_is_better}).searcher
    better, worse = (0.1, 0.9) if smaller_is_better else (0.9, 0.1)
    assert searcher.improves_on(better, worse) and not searcher.improves_on(worse, better)
    assert not searcher.improves_on(0.5, 0.5)
    assert searcher.improves_on(worse, None) and searcher.improves_on(worse, float("nan"))
    assert not searcher.improves_on(float("nan"), None) and not searcher.improves_on(float("nan"), worse)
