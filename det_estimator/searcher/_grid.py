"""The ``grid`` searcher: one trial per point of the Cartesian product of every hyperparameter's grid points."""

from typing import Any

from det_estimator.config import ExperimentConfig, grid_point, grid_size, searcher_key
from det_estimator.searcher._full_length import FullLengthSearch
from det_estimator.searcher._seeds import trial_seed


class GridSearch(FullLengthSearch):
    """Trains every point of the grid to ``max_length``, ``max_concurrent_trials`` at a time.

    The grid points of each hyperparameter are those of its spec's
    ``grid_points()``: int, double and log ones need ``count``, categorical
    ones give every value, constants their value. Trial ``i`` gets point ``i``
    of the product (the last hyperparameter changes fastest) and the seed
    derived from the experiment seed and ``i``. A trial that exits early,
    InvalidHP included, is not replaced: its point stays untried.

    Args:
        config: An experiment config whose ``searcher.name`` is "grid".

    Raises:
        ConfigError: If an int, double or log hyperparameter has no ``count``.
    """

    name = "grid"

    def __init__(self, config: ExperimentConfig) -> None:
        super().__init__(
            config,
            total_trials=grid_size(config.hyperparameters),
            max_concurrent=searcher_key(config.searcher.max_concurrent_trials, "max_concurrent_trials"),
            replaces_invalid_hp=False,
        )

    def _new_trial(self, request_id: int, index: int) -> tuple[dict[str, Any], int]:
        seed = trial_seed(self._config.reproducibility.experiment_seed, request_id)
        return grid_point(self._config.hyperparameters, index), seed
