import math
import statistics

import pytest

from det_estimator.searcher import Create, ExitedReason, Shutdown, TPESearch, make_search_method
from det_estimator.searcher._tpe import startup_trials

SPACE = {
    "global_batch_size": {"type": "categorical", "vals": [16, 32]},
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
    "units": {"type": "int", "minval": -2, "maxval": 5},
    "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
    "scale": {"type": "log", "minval": 1, "maxval": 3, "base": 2},
    "model": {"act": {"type": "categorical", "vals": ["relu", [1, 2], {"k": "v"}]}, "layers": [64, 32]},
    "fixed": {"type": "const", "val": {"a": 1}},
    "empty_group": {},
}


def tpe(sim, max_trials=12, concurrency=1, space=SPACE, seed=3, **searcher):
    section = {"name": "tpe", "max_trials": max_trials, "max_concurrent_trials": concurrency, **searcher}
    return sim.make_config(section, space, seed=seed)


def test_values_respect_their_specs(sim):
    run = sim.simulate(tpe(sim, max_trials=24, concurrency=3), order=2)
    assert isinstance(run.method, TPESearch)
    assert len(run.trials) == 24 and run.shutdown == Shutdown(failure=False)
    for trial in run.trials.values():
        values = trial.hparams
        assert values["global_batch_size"] in (16, 32)
        assert type(values["x"]) is float and 0.0 <= values["x"] <= 1.0
        assert type(values["units"]) is int and -2 <= values["units"] <= 5
        assert -4 - 1e-9 <= math.log10(values["lr"]) <= -1 + 1e-9
        assert 1 - 1e-9 <= math.log2(values["scale"]) <= 3 + 1e-9
        assert values["model"]["act"] in ("relu", [1, 2], {"k": "v"})
        assert values["model"]["layers"] == [64, 32]
        assert values["fixed"] == {"a": 1}
        assert values["empty_group"] == {}
        assert list(values) == list(SPACE) and list(values["model"]) == ["act", "layers"]


def test_same_events_same_proposals(sim):
    first = sim.simulate(tpe(sim, concurrency=2), order=4)
    second = sim.simulate(tpe(sim, concurrency=2), order=4)
    assert first.records == second.records
    other_seed = sim.simulate(tpe(sim, concurrency=2, seed=4), order=4)
    assert [t.hparams for t in other_seed.trials.values()] != [t.hparams for t in first.trials.values()]


def test_the_model_moves_toward_the_optimum(sim):
    space = {"global_batch_size": 32, "x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    run = sim.simulate(tpe(sim, max_trials=40, space=space), metric=lambda hparams, length: sim.quality(hparams))
    distances = [abs(run.trials[i].hparams["x"] - 0.3) for i in range(40)]
    startup = startup_trials(40)
    assert startup == 10
    assert statistics.median(distances[-15:]) < statistics.median(distances[:startup]) / 3


def test_larger_is_better_is_maximised(sim):
    space = {"global_batch_size": 32, "x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    config = tpe(sim, max_trials=30, space=space, smaller_is_better=False)
    run = sim.simulate(config, metric=lambda hparams, length: -sim.quality(hparams))
    distances = [abs(run.trials[i].hparams["x"] - 0.3) for i in range(30)]
    assert statistics.median(distances[-10:]) < statistics.median(distances[:7]) / 3


def test_invalid_hp_is_replaced_and_nan_is_worst(sim):
    def metric(hparams, length):
        return float("nan") if hparams["x"] > 0.8 else sim.quality(hparams)

    run = sim.simulate(
        tpe(sim, max_trials=10, concurrency=2),
        metric=metric,
        exit_at=lambda request_id, *_: ExitedReason.INVALID_HP if request_id in (1, 4) else None,
    )
    assert sum(trial.closed for trial in run.trials.values()) == 10
    assert len(run.trials) == 12
    history = run.method.state_dict()["extra"]["history"]
    assert [entry["state"] for entry in history].count("failed") == 2
    assert all(
        entry["loss"] == "inf" for entry in history if entry["state"] == "complete" and entry["params"]['["x"]'] > 0.8
    )


def test_startup_trials():
    assert [startup_trials(n) for n in (1, 8, 12, 40, 400)] == [2, 2, 3, 10, 10]


def test_only_constants_need_no_model(sim):
    method = make_search_method(tpe(sim, max_trials=2, space={"global_batch_size": 32}))
    ops = method.initial_operations()
    assert ops[0] == Create(0, {"global_batch_size": 32}, ops[0].trial_seed)


def test_optuna_stays_quiet(sim, capfd):
    import optuna

    verbosity = optuna.logging.get_verbosity()
    sim.simulate(tpe(sim, max_trials=4))
    out, err = capfd.readouterr()
    assert "A new study created" not in out + err
    assert optuna.logging.get_verbosity() == verbosity


@pytest.mark.parametrize("concurrency", [1, 3])
def test_tpe_resumes_everywhere(sim, concurrency):
    config = tpe(sim, max_trials=8, concurrency=concurrency)
    sim.check_resumes_everywhere(config, order=1, exit_at=lambda r, *_: ExitedReason.INVALID_HP if r == 2 else None)
