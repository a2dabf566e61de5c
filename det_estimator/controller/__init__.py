"""The trial controller: drives one EstimatorTrial through workloads, validations and checkpoints."""

from det_estimator.controller._trial_controller import (
    COMPLETED,
    PAUSED,
    TrialController,
    TrialLifecycleError,
    TrialObserver,
    TrialOutcome,
)

__all__ = ["COMPLETED", "PAUSED", "TrialController", "TrialLifecycleError", "TrialObserver", "TrialOutcome"]
