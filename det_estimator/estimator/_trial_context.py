"""EstimatorTrialContext: what an EstimatorTrial gets from the harness."""

from typing import Any, Optional

from det_estimator._trial_context_base import TrialContextBase
from det_estimator.config import ExperimentConfig
from det_estimator.core import DistributedContext
from det_estimator.estimator._context import EstimatorContext


class EstimatorTrialContext(EstimatorContext, TrialContextBase):
    """The context of one trial: its hyperparameters, batch sizes, seed and config.

    Args:
        config: the validated experiment config.
        hparams: this trial's hyperparameter values (sampled from the config).
        trial_seed: the seed of this trial.
        distributed: where this process stands in the job.
        trial_id: the trial's id in the experiment store.
        experiment_id: its experiment's id.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        hparams: dict[str, Any],
        trial_seed: int,
        distributed: Optional[DistributedContext] = None,
        trial_id: int = 0,
        experiment_id: int = 0,
    ):
        optimizations = config.optimizations
        super().__init__(
            distributed,
            aggregation_frequency=optimizations.aggregation_frequency,
            average_aggregated_gradients=optimizations.average_aggregated_gradients,
            gradient_compression=optimizations.gradient_compression,
            seed=trial_seed,
        )
        TrialContextBase.__init__(self, config, hparams, trial_seed, trial_id, experiment_id)
