"""det-estimator: train, evaluate and serve tf.estimator models on one to many Horovod workers.

Typical use::

    import det_estimator as det

    class MyTrial(det.EstimatorTrial):
        ...

The public names are loaded on first use, so that importing the package (as the
``det-estimator`` command and the launcher do) does not import TensorFlow.
"""

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "DistributedContext": "det_estimator.context",
    "EstimatorContext": "det_estimator.context",
    "EstimatorExperimentalContext": "det_estimator.context",
    "EstimatorTrialContext": "det_estimator.context",
    "EstimatorTrial": "det_estimator.trial",
    "EstimatorNativeContext": "det_estimator.native",
    "init": "det_estimator.native",
    "MetricReducer": "det_estimator.reducers",
    "RunHook": "det_estimator.hooks",
    "run_trial": "det_estimator._run",
    "load_estimator_from_checkpoint_path": "det_estimator._serving",
}

__all__ = [
    "DistributedContext",
    "EstimatorContext",
    "EstimatorExperimentalContext",
    "EstimatorNativeContext",
    "EstimatorTrial",
    "EstimatorTrialContext",
    "MetricReducer",
    "RunHook",
    "__version__",
    "init",
    "load_estimator_from_checkpoint_path",
    "run_trial",
]

if TYPE_CHECKING:
    from det_estimator._run import run_trial
    from det_estimator._serving import load_estimator_from_checkpoint_path
    from det_estimator.context import (
        DistributedContext,
        EstimatorContext,
        EstimatorExperimentalContext,
        EstimatorTrialContext,
    )
    from det_estimator.hooks import RunHook
    from det_estimator.native import EstimatorNativeContext, init
    from det_estimator.reducers import MetricReducer
    from det_estimator.trial import EstimatorTrial


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'det_estimator' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted([*globals(), *_EXPORTS])
