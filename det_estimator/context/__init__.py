"""The contexts the harness hands to user code: distributed facts, wrappers, hyperparameters."""

from det_estimator.context._distributed import DistributedContext
from det_estimator.context._estimator import EstimatorContext, EstimatorExperimentalContext
from det_estimator.context._trial import EstimatorTrialContext

__all__ = ["DistributedContext", "EstimatorContext", "EstimatorExperimentalContext", "EstimatorTrialContext"]
