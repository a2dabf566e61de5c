"""The tf.estimator trial type: ``EstimatorTrial``, its contexts and its controller, on the Core API.

Names follow the reference system's ``determined.estimator`` module, so a trial that
used ``det.estimator.EstimatorTrial`` ports by changing ``import determined as det``
to ``import det_estimator as det``.

It needs tf.estimator: on the current stack (TensorFlow 2.16 and later) importing it raises
:class:`~det_estimator.errors.EstimatorUnavailableError`, which says what to install.
"""

# ruff: noqa: E402 -- the imports follow the check, which says what is missing where they would fail

from det_estimator._stack import require_estimator

# Before anything below imports tf.estimator, whose absence would show as an AttributeError deep inside.
require_estimator("det_estimator.estimator (EstimatorTrial and its contexts)")

from det_estimator.estimator._context import EstimatorContext, EstimatorExperimentalContext
from det_estimator.estimator._native_context import EstimatorNativeContext
from det_estimator.estimator._serving import load_estimator_from_checkpoint_path
from det_estimator.estimator._trial import EstimatorTrial, ServingInputReceiverFn
from det_estimator.estimator._trial_context import EstimatorTrialContext
from det_estimator.hooks import RunHook
from det_estimator.reducers import MetricReducer

__all__ = [
    "EstimatorContext",
    "EstimatorExperimentalContext",
    "EstimatorNativeContext",
    "EstimatorTrial",
    "EstimatorTrialContext",
    "MetricReducer",
    "RunHook",
    "ServingInputReceiverFn",
    "load_estimator_from_checkpoint_path",
]
