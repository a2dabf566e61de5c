"""The ``tpe`` searcher: hyperparameters proposed by Optuna's Tree-structured Parzen Estimator.

Optuna's sampler keeps its random state in memory, which a paused or killed
search would lose. So the search keeps only its history (each trial's point in
Optuna's space and its outcome) and, for the k-th trial, builds a fresh
in-memory study from that history with a sampler seeded from the experiment
seed and k, and asks it once. The same history gives the same proposal, in the
original search and in a resumed one.
"""

import contextlib
import json
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Optional

from det_estimator.config import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    ExperimentConfig,
    IntHyperparameter,
    LogHyperparameter,
    searcher_key,
)
from det_estimator.config._json_values import thaw
from det_estimator.searcher._base import decode_float, encode_float
from det_estimator.searcher._full_length import FullLengthSearch
from det_estimator.searcher._operations import ExitedReason
from det_estimator.searcher._seeds import derive_seed, trial_seed

_RUNNING, _COMPLETE, _FAILED = "running", "complete", "failed"


def startup_trials(max_trials: int) -> int:
    """Trials sampled at random before the TPE model is used.

    Optuna's default of 10 would leave little for the model in a small budget,
    so a quarter of ``max_trials`` is used, from 2 to 10.

    Args:
        max_trials: ``searcher.max_trials``.

    Returns:
        The number of startup trials.
    """
    return min(10, max(2, max_trials // 4))


def _leaves(space: Mapping[str, Any], names: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, node in space.items():
        if isinstance(node, Mapping):
            yield from _leaves(node, (*names, name))
        else:
            yield (*names, name), node


def _assemble(space: Mapping[str, Any], chosen: dict[tuple[str, ...], Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Nests the chosen values as the space nests them (an empty group stays an empty dict)."""
    return {
        name: _assemble(node, chosen, (*names, name)) if isinstance(node, Mapping) else chosen[(*names, name)]
        for name, node in space.items()
    }


def _distribution(spec: Any) -> Any:
    """Optuna's distribution for a spec; None for a constant."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(spec, IntHyperparameter):
        return IntDistribution(spec.minval, spec.maxval)
    if isinstance(spec, DoubleHyperparameter):
        return FloatDistribution(spec.minval, spec.maxval)
    if isinstance(spec, LogHyperparameter):
        # The exponent is searched, uniformly as the random searcher draws it, so any base works.
        return FloatDistribution(spec.minval, spec.maxval)
    if isinstance(spec, CategoricalHyperparameter):
        # Indices: Optuna's choices must be plain scalars, and values may be lists or mappings.
        return CategoricalDistribution(list(range(len(spec.vals))))
    if isinstance(spec, ConstHyperparameter):
        return None
    raise TypeError(f"Unknown hyperparameter spec: {spec!r}")


def _value(spec: Any, param: Any) -> Any:
    """The hyperparameter value of an Optuna parameter (or of a constant, whose param is None)."""
    if isinstance(spec, IntHyperparameter):
        return int(param)
    if isinstance(spec, DoubleHyperparameter):
        return float(param)
    if isinstance(spec, LogHyperparameter):
        return spec.base ** float(param)
    if isinstance(spec, CategoricalHyperparameter):
        return thaw(spec.vals[int(param)])
    return thaw(spec.val)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[Any]:
    """Imports Optuna and silences its per-study log lines and experimental-feature warnings."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield optuna
    finally:
        optuna.logging.set_verbosity(verbosity)


class TPESearch(FullLengthSearch):
    """``max_trials`` trials proposed by Optuna's ``TPESampler``, each trained to ``max_length``.

    Each trial's final metric (smaller is better after ``smaller_is_better``; NaN
    as +inf) is told to the model; running trials are given to it as running,
    so that concurrent proposals spread out (Optuna's constant liar). The first
    :func:`startup_trials` trials are sampled at random by Optuna. Int, double,
    log (the exponent is modelled) and categorical hyperparameters are
    searched, nested ones included; constants pass through. A trial that
    raised InvalidHP is told as failed and replaced, as in the random search.
    Proposals depend on Optuna's version: resume a search with the version it
    started with.

    Args:
        config: An experiment config whose ``searcher.name`` is "tpe".
    """

    name = "tpe"

    def __init__(self, config: ExperimentConfig) -> None:
        searcher = config.searcher
        super().__init__(
            config,
            total_trials=searcher_key(searcher.max_trials, "max_trials"),
            max_concurrent=searcher_key(searcher.max_concurrent_trials, "max_concurrent_trials"),
            replaces_invalid_hp=True,
        )
        self._leaves = list(_leaves(config.hyperparameters))
        # Optuna parameter names: the JSON of each leaf's names, unique even if a name contains a dot.
        self._keys = [json.dumps(names) for names, _ in self._leaves]
        self._startup_trials = startup_trials(searcher_key(searcher.max_trials, "max_trials"))
        self._history: list[dict[str, Any]] = []  # one entry per trial created, in request id order

    def _new_trial(self, request_id: int, index: int) -> tuple[dict[str, Any], int]:
        params = self._ask(request_id)
        self._history.append({"request_id": request_id, "params": params, "state": _RUNNING, "loss": None})
        chosen = {names: _value(spec, params.get(key)) for (names, spec), key in zip(self._leaves, self._keys)}
        hparams = _assemble(self._config.hyperparameters, chosen, ())
        return hparams, trial_seed(self._config.reproducibility.experiment_seed, request_id)

    def _ask(self, k: int) -> dict[str, Any]:
        distributions = {}
        for (_, spec), key in zip(self._leaves, self._keys):
            distribution = _distribution(spec)
            if distribution is not None:
                distributions[key] = distribution
        if not distributions:
            return {}
        with _quiet_optuna() as optuna:
            sampler = optuna.samplers.TPESampler(
                seed=derive_seed(self._config.reproducibility.experiment_seed, "tpe", k),
                n_startup_trials=self._startup_trials,
                multivariate=True,
                constant_liar=True,
            )
            study = optuna.create_study(direction="minimize", sampler=sampler)
            for entry in self._history:
                study.add_trial(_frozen_trial(optuna, entry, distributions))
            proposal = study.ask(distributions)
            # Plain Python numbers, so that the history is JSON and compares equal after a round trip.
            return {key: _plain(value) for key, value in proposal.params.items()}

    def _entry(self, request_id: int) -> dict[str, Any]:
        # One entry per trial created, appended in request id order: the id is the index.
        return self._history[request_id]

    def _record_metric(self, request_id: int, loss: float) -> None:
        entry = self._entry(request_id)
        entry["state"], entry["loss"] = _COMPLETE, encode_float(loss)

    def _record_exit(self, request_id: int, reason: ExitedReason) -> None:
        self._entry(request_id)["state"] = _FAILED

    def _extra_state(self) -> dict[str, Any]:
        return {"history": json.loads(json.dumps(self._history))}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self._history = json.loads(json.dumps(state["history"]))


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _frozen_trial(optuna: Any, entry: dict[str, Any], distributions: dict[str, Any]) -> Any:
    state = {
        _RUNNING: optuna.trial.TrialState.RUNNING,
        _COMPLETE: optuna.trial.TrialState.COMPLETE,
        _FAILED: optuna.trial.TrialState.FAIL,
    }[entry["state"]]
    value: Optional[float] = decode_float(entry["loss"]) if entry["state"] == _COMPLETE else None
    return optuna.trial.create_trial(params=entry["params"], distributions=distributions, value=value, state=state)
