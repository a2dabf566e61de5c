"""The ``single`` searcher: one trial, trained to ``max_length``."""

from typing import Any

from det_estimator.config import ExperimentConfig
from det_estimator.searcher._full_length import FullLengthSearch


class SingleSearch(FullLengthSearch):
    """One trial with the experiment seed as its seed and the hyperparameters that seed samples.

    Operations: ``Create(0)``, ``ValidateAfter(0, max_length)``, then ``Close(0)``
    and ``Shutdown()``; ``Shutdown(failure=True)`` if the trial exits early.

    Args:
        config: An experiment config whose ``searcher.name`` is "single".
    """

    name = "single"

    def __init__(self, config: ExperimentConfig) -> None:
        super().__init__(config, total_trials=1, max_concurrent=1, replaces_invalid_hp=False)

    def _new_trial(self, request_id: int, index: int) -> tuple[dict[str, Any], int]:
        seed = self._config.reproducibility.experiment_seed
        return self._config.sample_hyperparameters(seed), seed
