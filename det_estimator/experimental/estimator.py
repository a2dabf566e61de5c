"""``det.experimental.estimator.init()``: the native API under the reference system's name for it."""

from det_estimator.estimator import EstimatorNativeContext
from det_estimator.native import init

__all__ = ["EstimatorNativeContext", "init"]
