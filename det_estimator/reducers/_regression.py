"""Per-example error averages (MSE, MAE, log loss) and the R2 score."""

import abc
import math
from typing import Any, Optional

import numpy as np

from det_estimator.reducers import _functional as functional
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer

# (number of examples of nonzero weight, sum of weights, sum of weight * term)
AverageState = tuple[np.int64, np.float64, np.float64]
# (examples of nonzero weight, sum of weights, shift, weighted mean of labels - shift,
#  weighted squared deviations of labels from their mean, weighted squared residuals)
R2State = tuple[np.int64, np.float64, np.float64, np.float64, np.float64, np.float64]


def _weighted_total(terms: np.ndarray, weights: Any) -> float:
    return float(terms.sum() if weights is None else np.dot(weights.astype(np.float64, copy=False), terms))


def _example_count(weights: Any, size: int) -> int:
    return size if weights is None else int(np.count_nonzero(weights))


class _WeightedAverageReducer(MetricReducer, abc.ABC):
    """Weighted mean of a per-example term, ``sum w * term / sum w``."""

    def __init__(self) -> None:
        self.reset()

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {}

    def reset(self) -> None:
        """Zeroes the sums."""
        self._count = 0
        self._weight = 0.0
        self._total = 0.0

    @abc.abstractmethod
    def _terms(self, batch: validation.LabeledBatch) -> np.ndarray:
        """Per-example float64 terms of a validated batch."""

    def _parse(self, metric: Any) -> validation.LabeledBatch:
        return validation.parse_labeled_batch(type(self).__name__, metric)

    def accumulate(self, metric: Any) -> AverageState:
        """Adds one batch.

        Args:
            metric: ``{"labels", "predictions", "weights" (optional, >= 0)}``,
                arrays of the same number of elements (flattened).

        Returns:
            ``(count, sum_of_weights, weighted_sum_of_terms)`` so far, where
            count is the number of examples of nonzero weight (int64).

        Raises:
            ValueError: On NaN or inf, invalid weights or mismatched sizes.
        """
        batch = self._parse(metric)
        terms = self._terms(batch)
        weights = batch.weights
        self._count += _example_count(weights, terms.size)
        self._weight += float(terms.size) if weights is None else float(np.sum(weights, dtype=np.float64))
        self._total += _weighted_total(terms, weights)
        return np.int64(self._count), np.float64(self._weight), np.float64(self._total)

    def cross_slot_reduce(self, per_slot_metrics: list[AverageState]) -> np.float64:
        """Sums the states of all workers and returns the weighted mean.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            The metric as np.float64.

        Raises:
            ValueError: If there are no examples (of nonzero weight) at all.
        """
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, tuple)
        count = sum(int(state[0]) for state in states)
        weight = math.fsum(float(state[1]) for state in states)
        if count == 0 or weight == 0:
            raise validation.no_examples_error(name)
        return np.float64(math.fsum(float(state[2]) for state in states) / weight)


class MeanSquaredError(_WeightedAverageReducer):
    """Weighted mean of ``(label - prediction) ** 2`` over all elements.

    Equal to ``sklearn.metrics.mean_squared_error(labels, predictions,
    sample_weight=weights)`` on flattened inputs. The state is ``(count,
    sum_of_weights, weighted_sum_of_squared_errors)``. ``cross_slot_reduce``
    returns np.float64.

    Example:
        >>> reducer = MeanSquaredError()
        >>> state = reducer.accumulate({"labels": [1.0, 2.0], "predictions": [1.0, 4.0]})
        >>> float(reducer.cross_slot_reduce([state]))
        2.0
    """

    def _terms(self, batch: validation.LabeledBatch) -> np.ndarray:
        errors = batch.labels.astype(np.float64) - batch.predictions.astype(np.float64)
        return errors * errors


class MeanAbsoluteError(_WeightedAverageReducer):
    """Weighted mean of ``|label - prediction|`` over all elements.

    Equal to ``sklearn.metrics.mean_absolute_error(labels, predictions,
    sample_weight=weights)`` on flattened inputs. ``cross_slot_reduce`` returns
    np.float64.

    Example:
        >>> reducer = MeanAbsoluteError()
        >>> state = reducer.accumulate({"labels": [1.0, 2.0], "predictions": [1.0, 4.0]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def _terms(self, batch: validation.LabeledBatch) -> np.ndarray:
        return np.abs(batch.labels.astype(np.float64) - batch.predictions.astype(np.float64))


class LogLoss(_WeightedAverageReducer):
    """Weighted mean binary cross-entropy (natural log).

    With probabilities, equal to ``sklearn.metrics.log_loss(labels,
    probabilities, sample_weight=weights, labels=[0, 1])``: probabilities are
    clipped to ``[eps, 1 - eps]``, eps being the machine epsilon of their dtype
    (float32 probabilities of exactly 1.0 cost ``-log(eps) ~ 15.9``); the loss
    itself is computed in float64. With logits, the stable ``max(x, 0) - x * y
    + log1p(exp(-|x|))`` is used, exact without clipping.

    Labels are 0/1 or bool. ``cross_slot_reduce`` returns np.float64.

    Args:
        from_logits: Whether predictions are logits rather than probabilities.

    Example:
        >>> reducer = LogLoss()
        >>> state = reducer.accumulate({"labels": [1, 0], "predictions": [0.5, 0.5]})
        >>> round(float(reducer.cross_slot_reduce([state])), 6)
        0.693147
    """

    def __init__(self, from_logits: bool = False) -> None:
        if not isinstance(from_logits, bool):
            raise validation.invalid_argument("from_logits", "a bool", from_logits)
        self.from_logits = from_logits
        super().__init__()

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {"from_logits": self.from_logits}

    def _terms(self, batch: validation.LabeledBatch) -> np.ndarray:
        name = type(self).__name__
        labels = validation.binary_labels(name, batch.labels)
        if not self.from_logits:
            validation.check_probabilities(name, "predictions", batch.predictions)
        return functional.log_loss_terms(labels, batch.predictions, from_logits=self.from_logits)


class R2(MetricReducer):
    """Coefficient of determination ``1 - SS_res / SS_tot`` over all elements.

    Equal to ``sklearn.metrics.r2_score(labels, predictions,
    sample_weight=weights)`` on flattened inputs (a multi-output model thus
    gets the R2 of all its outputs pooled, not their average). Constant labels
    give 1.0 for perfect predictions and 0.0 otherwise, as sklearn; fewer than
    two examples give NaN with a RuntimeWarning.

    Each state holds the weighted mean of the labels and their weighted squared
    deviations from it, merged with Chan et al.'s parallel formula: unlike raw
    sums of squares, this stays accurate when the labels' mean is large
    compared to their spread. The mean is kept relative to a shift (the
    worker's first label), so that its rounding error scales with the spread
    of the labels rather than with their magnitude. ``cross_slot_reduce``
    returns np.float64.

    Example:
        >>> reducer = R2()
        >>> state = reducer.accumulate({"labels": [1.0, 2.0, 3.0], "predictions": [1.0, 2.0, 4.0]})
        >>> float(reducer.cross_slot_reduce([state]))
        0.5
    """

    def __init__(self) -> None:
        self.reset()

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {}

    def reset(self) -> None:
        """Zeroes the moments."""
        self._count = 0
        self._shift: Optional[float] = None
        self._moments = (0.0, 0.0, 0.0)
        self._residual = 0.0

    def accumulate(self, metric: Any) -> R2State:
        """Adds one batch.

        Args:
            metric: ``{"labels", "predictions", "weights" (optional, >= 0)}``.

        Returns:
            ``(count, sum_of_weights, shift, mean_of_labels_minus_shift,
            squared_deviations_of_labels, residual_sum_of_squares)`` so far.

        Raises:
            ValueError: On NaN or inf, invalid weights or mismatched sizes.
        """
        batch = validation.parse_labeled_batch(type(self).__name__, metric)
        labels = batch.labels.astype(np.float64)
        if self._shift is None and labels.size:
            self._shift = float(labels[0])
        shift = self._shift or 0.0
        residuals = labels - batch.predictions.astype(np.float64)
        self._count += _example_count(batch.weights, labels.size)
        batch_moments = functional.weighted_moments(labels - shift, batch.weights)
        self._moments = functional.merge_moments(self._moments, batch_moments)
        self._residual += _weighted_total(residuals * residuals, batch.weights)
        weight, mean, m2 = self._moments
        return (
            np.int64(self._count),
            np.float64(weight),
            np.float64(shift),
            np.float64(mean),
            np.float64(m2),
            np.float64(self._residual),
        )

    def cross_slot_reduce(self, per_slot_metrics: list[R2State]) -> np.float64:
        """Merges the moments of all workers and returns R2.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            R2 as np.float64.

        Raises:
            ValueError: If there are no examples (of nonzero weight) at all.
        """
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, tuple)
        count = sum(int(state[0]) for state in states)
        reference = float(states[0][2])
        moments = (0.0, 0.0, 0.0)
        for _, weight, shift, mean, m2, _ in states:
            # Shifts are nearby labels, so their difference is computed exactly.
            worker_moments = (float(weight), float(mean) + (float(shift) - reference), float(m2))
            moments = functional.merge_moments(moments, worker_moments)
        if count == 0 or moments[0] == 0:
            raise validation.no_examples_error(name)
        if count < 2:
            validation.warn_undefined(f"{name}: R2 is not well-defined with fewer than two examples; returning NaN.")
            return np.float64(np.nan)
        residual = math.fsum(float(state[5]) for state in states)
        return np.float64(functional.r2_from_sums(residual, moments[2]))
