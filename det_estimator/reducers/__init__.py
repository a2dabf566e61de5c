"""Metric reducers: validation metrics computed exactly across workers.

A :class:`MetricReducer` accumulates a state per batch on each worker; the states
of all workers are then combined by ``cross_slot_reduce``. The built-in reducers
work on plain NumPy arrays:

* aggregation: :class:`Sum`, :class:`Mean`, :class:`WeightedMean`;
* ranking: :class:`RocAuc` and :class:`AveragePrecision` (exact),
  :class:`BinnedRocAuc` (approximate, constant-size state);
* classification: :class:`Accuracy`, :class:`Precision`, :class:`Recall`, :class:`F1`;
* regression: :class:`MeanSquaredError`, :class:`MeanAbsoluteError`, :class:`R2`,
  and :class:`LogLoss` for probabilistic classifiers.

``make_metric`` turns any reducer into an Estimator ``eval_metric_ops`` entry
reduced across all workers (it is what ``context.experimental.make_metric``
calls). It needs TensorFlow, so it is loaded on first use: the reducers
themselves never import TensorFlow.
"""

from typing import Any

from det_estimator.reducers._aggregation import Mean, Sum, WeightedMean
from det_estimator.reducers._base import MetricReducer
from det_estimator.reducers._binned_roc_auc import BinnedRocAuc
from det_estimator.reducers._classification import F1, Accuracy, Precision, Recall
from det_estimator.reducers._regression import R2, LogLoss, MeanAbsoluteError, MeanSquaredError
from det_estimator.reducers._roc_auc import AveragePrecision, RocAuc, ScoreSamples

__all__ = [
    "F1",
    "R2",
    "Accuracy",
    "AveragePrecision",
    "BinnedRocAuc",
    "LogLoss",
    "Mean",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "MetricReducer",
    "Precision",
    "Recall",
    "RocAuc",
    "ScoreSamples",
    "Sum",
    "WeightedMean",
    "make_metric",
]


def __getattr__(name: str) -> Any:
    if name == "make_metric":
        from det_estimator.reducers._make_metric import make_metric

        return make_metric
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
