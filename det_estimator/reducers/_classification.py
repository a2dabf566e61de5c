"""Confusion-matrix metrics: accuracy, precision, recall and F1."""

import math
import numbers
from typing import Any, Optional

import numpy as np

from det_estimator.reducers import _functional as functional
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer

_AVERAGES = ("binary", "micro", "macro")


class _ConfusionMatrixReducer(MetricReducer):
    """Sums a confusion matrix over batches and workers.

    Predictions are mapped to class ids as follows:

    * scores of shape ``[n, num_classes]`` (any leading shape whose elements
      number ``n * num_classes``): the argmax;
    * otherwise, with ``num_classes == 2``: class 1 where ``prediction >=
      threshold`` (probabilities, or 0/1 class ids with the default 0.5);
    * otherwise, with ``num_classes > 2``: the predictions are class ids.

    Labels are class ids in ``[0, num_classes)`` (bool for binary).
    """

    def __init__(self, num_classes: int = 2, threshold: float = 0.5) -> None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
            raise validation.invalid_argument("num_classes", "an integer >= 2", num_classes)
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
            raise validation.invalid_argument("threshold", "a finite number", threshold)
        self.num_classes: int = int(num_classes)
        self.threshold: float = float(threshold)
        self.reset()

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {"num_classes": self.num_classes, "threshold": self.threshold}

    def reset(self) -> None:
        """Zeroes the confusion matrix."""
        self._matrix = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)

    def _predicted_classes(self, name: str, predictions: np.ndarray) -> np.ndarray:
        if predictions.ndim == 2:
            return np.argmax(predictions, axis=1).astype(np.int64)
        if self.num_classes == 2:
            return (predictions >= self.threshold).astype(np.int64)
        validation.check_finite(name, "predictions", predictions)
        return validation.class_ids(name, "predictions", predictions, self.num_classes)

    def accumulate(self, metric: Any) -> np.ndarray:
        """Adds one batch to the confusion matrix.

        Args:
            metric: ``{"labels": class ids, "predictions": scores or class ids,
                "weights": optional, >= 0}``.

        Returns:
            A copy of the confusion matrix so far (rows: true class, columns:
            predicted class): int64 counts, or float64 sums of weights once a
            batch had weights.

        Raises:
            ValueError: On invalid class ids, NaN, invalid weights or
                mismatched sizes.
        """
        name = type(self).__name__
        batch = validation.parse_labeled_batch(
            name, metric, allow_inf_predictions=True, prediction_columns=self.num_classes
        )
        labels = validation.class_ids(name, "labels", batch.labels, self.num_classes)
        predicted = self._predicted_classes(name, batch.predictions)
        # Adding a float64 weighted matrix to int64 counts promotes to float64.
        self._matrix = self._matrix + functional.confusion_matrix(labels, predicted, self.num_classes, batch.weights)
        return self._matrix.copy()

    def _merged_matrix(self, per_slot_metrics: list[np.ndarray]) -> np.ndarray:
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, np.ndarray)
        shape = (self.num_classes, self.num_classes)
        matrix = np.zeros(shape, dtype=np.int64)
        for state in states:
            if state.shape != shape:
                raise ValueError(f"{name}: expected {shape} confusion matrices, received one of shape {state.shape}.")
            matrix = matrix + state
        if matrix.sum() == 0:
            raise validation.no_examples_error(name)
        return matrix


class Accuracy(_ConfusionMatrixReducer):
    """Fraction of correctly classified examples (weighted if weights are given).

    Equal to ``sklearn.metrics.accuracy_score(labels, predicted_classes,
    sample_weight=weights)``. See :class:`Precision` for how predictions map to
    classes. ``cross_slot_reduce`` returns np.float64.

    Args:
        num_classes: Number of classes, >= 2.
        threshold: Binary decision threshold: ``prediction >= threshold`` is
            class 1. Unused when ``num_classes > 2``.

    Example:
        >>> reducer = Accuracy()
        >>> state = reducer.accumulate({"labels": [0, 1, 1, 0], "predictions": [0.2, 0.9, 0.4, 0.1]})
        >>> float(reducer.cross_slot_reduce([state]))
        0.75
    """

    def cross_slot_reduce(self, per_slot_metrics: list[np.ndarray]) -> np.float64:
        """Sums the confusion matrices of all workers and returns the accuracy.

        Args:
            per_slot_metrics: The final confusion matrices of all workers.

        Returns:
            The accuracy as np.float64.

        Raises:
            ValueError: If there are no examples (of nonzero weight) at all.
        """
        return np.float64(functional.accuracy(self._merged_matrix(per_slot_metrics)))


class _PrecisionRecallF1Reducer(_ConfusionMatrixReducer):
    _INDEX = 0

    def __init__(self, num_classes: int = 2, average: Optional[str] = None, threshold: float = 0.5) -> None:
        super().__init__(num_classes, threshold)
        if average is None:
            average = "binary" if self.num_classes == 2 else "macro"
        if average not in _AVERAGES:
            raise validation.invalid_argument("average", f"None or one of {list(_AVERAGES)}", average)
        if average == "binary" and self.num_classes != 2:
            raise validation.invalid_argument("average", "'micro' or 'macro' when num_classes > 2", average)
        self.average = average

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {**super().get_config(), "average": self.average}

    def cross_slot_reduce(self, per_slot_metrics: list[np.ndarray]) -> np.float64:
        """Sums the confusion matrices of all workers and computes the metric.

        Args:
            per_slot_metrics: The final confusion matrices of all workers.

        Returns:
            The metric as np.float64.

        Raises:
            ValueError: If there are no examples (of nonzero weight) at all.
        """
        matrix = self._merged_matrix(per_slot_metrics)
        return np.float64(functional.precision_recall_f1(matrix, self.average)[self._INDEX])


class Precision(_PrecisionRecallF1Reducer):
    """Precision, binary or averaged over classes.

    Equal to ``sklearn.metrics.precision_score(labels, predicted_classes,
    average=average, labels=range(num_classes), sample_weight=weights,
    zero_division=0)``: a ratio whose denominator is 0 counts as 0, and
    "macro" averages over all ``num_classes`` classes, even absent ones.

    Predictions map to classes as follows: scores of shape ``[n,
    num_classes]`` give their argmax; otherwise, for 2 classes,
    ``prediction >= threshold`` is class 1 (so 0/1 class ids work too); for
    more classes, predictions are class ids. Labels are class ids (or bool).
    ``cross_slot_reduce`` returns np.float64.

    Args:
        num_classes: Number of classes, >= 2.
        average: "binary" (class 1 only; the default for 2 classes), "micro"
            (from the global counts) or "macro" (mean over classes; the default
            for more than 2 classes).
        threshold: Binary decision threshold. Unused when ``num_classes > 2``.

    Example:
        >>> reducer = Precision()
        >>> state = reducer.accumulate({"labels": [0, 1, 1, 0], "predictions": [0.2, 0.9, 0.4, 0.6]})
        >>> float(reducer.cross_slot_reduce([state]))
        0.5
    """


class Recall(_PrecisionRecallF1Reducer):
    """Recall, binary or averaged over classes.

    Equal to ``sklearn.metrics.recall_score`` with the same arguments as
    :class:`Precision`, whose documentation describes the inputs and options.

    Example:
        >>> reducer = Recall()
        >>> state = reducer.accumulate({"labels": [0, 1, 1, 0], "predictions": [0.2, 0.9, 0.4, 0.6]})
        >>> float(reducer.cross_slot_reduce([state]))
        0.5
    """

    _INDEX = 1


class F1(_PrecisionRecallF1Reducer):
    """F1 score, binary or averaged over classes.

    Equal to ``sklearn.metrics.f1_score`` with the same arguments as
    :class:`Precision`, whose documentation describes the inputs and options.
    The per-class score is ``2 tp / (2 tp + fp + fn)``, 0 when that is 0 / 0.

    Example:
        >>> reducer = F1()
        >>> state = reducer.accumulate({"labels": [0, 1, 1, 0], "predictions": [0.2, 0.9, 0.4, 0.6]})
        >>> float(reducer.cross_slot_reduce([state]))
        0.5
    """

    _INDEX = 2
