"""det-estimator: train, evaluate, tune and serve tf.estimator and Keras models on one to many Horovod workers.

Typical use::

    import det_estimator as det

    class MyTrial(det.estimator.EstimatorTrial):   # or det.EstimatorTrial
        ...

``det.core`` is the Core API every trial type and training script reports through;
``det.estimator`` the tf.estimator trial type. The public names are loaded on first
use, so that importing the package (as the ``det-estimator`` command and the launcher
do) does not import TensorFlow.
"""

import importlib
from typing import TYPE_CHECKING, Any

from det_estimator._version import __version__

# The reference system's format for a script's log lines, used as
# ``logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)``: level, process id, logger.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

# Public name -> the module that defines it.
_EXPORTS = {
    "ClusterInfo": "det_estimator._info",
    "DetEstimatorError": "det_estimator.errors",
    "DistributedContext": "det_estimator.core",
    "EnvContext": "det_estimator._trial_context_base",
    "EstimatorContext": "det_estimator.estimator",
    "EstimatorExperimentalContext": "det_estimator.estimator",
    "EstimatorNativeContext": "det_estimator.estimator",
    "EstimatorTrial": "det_estimator.estimator",
    "EstimatorTrialContext": "det_estimator.estimator",
    "InvalidHP": "det_estimator.errors",
    "MetricReducer": "det_estimator.reducers",
    "RunHook": "det_estimator.hooks",
    "TrialContext": "det_estimator._trial_context_base",
    "TrialOutcome": "det_estimator.orchestration",
    "get_cluster_info": "det_estimator._info",
    "init": "det_estimator.native",
    "load_estimator_from_checkpoint_path": "det_estimator.estimator",
    "run_trial": "det_estimator._run",
}
# Subpackages reached as attributes: det.core, det.estimator, det.experimental, det.keras.
_SUBPACKAGES = ("core", "estimator", "experimental", "keras")

__all__ = [
    "ClusterInfo",
    "DetEstimatorError",
    "DistributedContext",
    "EnvContext",
    "EstimatorContext",
    "EstimatorExperimentalContext",
    "EstimatorNativeContext",
    "EstimatorTrial",
    "EstimatorTrialContext",
    "InvalidHP",
    "LOG_FORMAT",
    "MetricReducer",
    "RunHook",
    "TrialContext",
    "TrialOutcome",
    "__version__",
    "core",
    "estimator",
    "experimental",
    "get_cluster_info",
    "init",
    "keras",
    "load_estimator_from_checkpoint_path",
    "run_trial",
]

if TYPE_CHECKING:
    from det_estimator import core, estimator, experimental, keras
    from det_estimator._info import ClusterInfo, get_cluster_info
    from det_estimator._run import run_trial
    from det_estimator._trial_context_base import EnvContext, TrialContext
    from det_estimator.core import DistributedContext
    from det_estimator.errors import DetEstimatorError, InvalidHP
    from det_estimator.estimator import (
        EstimatorContext,
        EstimatorExperimentalContext,
        EstimatorNativeContext,
        EstimatorTrial,
        EstimatorTrialContext,
        load_estimator_from_checkpoint_path,
    )
    from det_estimator.hooks import RunHook
    from det_estimator.native import init
    from det_estimator.orchestration import TrialOutcome
    from det_estimator.reducers import MetricReducer


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        value = importlib.import_module(f"det_estimator.{name}")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'det_estimator' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted([*globals(), *_EXPORTS, *_SUBPACKAGES])
