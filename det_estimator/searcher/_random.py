"""The ``random`` searcher: ``max_trials`` trials with hyperparameters drawn at random."""

from typing import Any

from det_estimator.config import ExperimentConfig, searcher_key
from det_estimator.searcher._full_length import FullLengthSearch
from det_estimator.searcher._seeds import trial_seed


class RandomSearch(FullLengthSearch):
    """``max_trials`` trials, each trained to ``max_length``, ``max_concurrent_trials`` at a time.

    Trial ``i`` gets the seed derived from the experiment seed and ``i``, and
    the hyperparameters that seed samples (int uniform with both ends included,
    double uniform, log ``base ** uniform(minval, maxval)``, categorical
    uniform). A trial that raised InvalidHP is replaced by a new one that does
    not count toward ``max_trials`` (up to ``MAX_INVALID_HP_REPLACEMENTS_PER_TRIAL``
    replacements per trial of ``max_trials``).

    Args:
        config: An experiment config whose ``searcher.name`` is "random".
    """

    name = "random"

    def __init__(self, config: ExperimentConfig) -> None:
        searcher = config.searcher
        super().__init__(
            config,
            total_trials=searcher_key(searcher.max_trials, "max_trials"),
            max_concurrent=searcher_key(searcher.max_concurrent_trials, "max_concurrent_trials"),
            replaces_invalid_hp=True,
        )

    def _new_trial(self, request_id: int, index: int) -> tuple[dict[str, Any], int]:
        seed = trial_seed(self._config.reproducibility.experiment_seed, request_id)
        return self._config.sample_hyperparameters(seed), seed
