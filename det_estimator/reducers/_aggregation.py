"""Sums and means of arbitrary per-batch values."""

import math
from typing import Any

import numpy as np

from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer

# (number of values, sum of values)
SumState = tuple[np.int64, np.float64]
# (number of values of nonzero weight, sum of weights, sum of weight * value)
WeightedMeanState = tuple[np.int64, np.float64, np.float64]


class _CountAndSum(MetricReducer):
    """Counts and sums every element of every batch."""

    def __init__(self) -> None:
        self.reset()

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {}

    def reset(self) -> None:
        """Zeroes the count and the sum."""
        self._count = 0
        self._sum = 0.0

    def accumulate(self, metric: Any) -> SumState:
        """Adds every element of one batch.

        Args:
            metric: An array-like of any shape, or ``{"values": array-like}``.
                Any other dict key, "weights" included, is an error: use
                :class:`WeightedMean` for weighted values.

        Returns:
            ``(count, sum)`` so far (int64, float64).

        Raises:
            ValueError: On NaN or inf values, non-numeric values or other keys.
        """
        values = validation.parse_values(type(self).__name__, metric)
        self._count += values.size
        self._sum += float(np.sum(values, dtype=np.float64))
        return np.int64(self._count), np.float64(self._sum)

    def _merge(self, per_slot_metrics: list[SumState]) -> tuple[int, float]:
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, tuple)
        count = sum(int(state[0]) for state in states)
        if count == 0:
            raise validation.no_examples_error(name)
        return count, math.fsum(float(state[1]) for state in states)


class Sum(_CountAndSum):
    """Sum of all elements of all batches on all workers.

    Input per batch: an array-like of any shape (every element is added), or
    ``{"values": array-like}``. Weights are not accepted (a "weights" key is
    an error rather than being ignored). ``cross_slot_reduce`` returns the sum
    as np.float64.

    Example:
        >>> reducer = Sum()
        >>> state = reducer.accumulate([[1, 2], [3, 4]])
        >>> float(reducer.cross_slot_reduce([state]))
        10.0
    """

    def cross_slot_reduce(self, per_slot_metrics: list[SumState]) -> np.float64:
        """Adds the sums of all workers.

        Args:
            per_slot_metrics: The final ``(count, sum)`` of all workers.

        Returns:
            The total as np.float64.

        Raises:
            ValueError: If no values were accumulated at all.
        """
        return np.float64(self._merge(per_slot_metrics)[1])


class Mean(_CountAndSum):
    """Arithmetic mean of all elements of all batches on all workers.

    Every element counts once, so batches of different sizes are weighted by
    their sizes. Input per batch: an array-like of any shape, or ``{"values":
    array-like}``. Weights are not accepted (a "weights" key is an error
    rather than being ignored); use :class:`WeightedMean` for them.
    ``cross_slot_reduce`` returns the mean as np.float64.

    Example:
        >>> reducer = Mean()
        >>> state = reducer.accumulate([1.0, 2.0, 6.0])
        >>> float(reducer.cross_slot_reduce([state]))
        3.0
    """

    def cross_slot_reduce(self, per_slot_metrics: list[SumState]) -> np.float64:
        """Divides the total of all workers by their total count.

        Args:
            per_slot_metrics: The final ``(count, sum)`` of all workers.

        Returns:
            The mean as np.float64.

        Raises:
            ValueError: If no values were accumulated at all.
        """
        count, total = self._merge(per_slot_metrics)
        return np.float64(total / count)


class WeightedMean(MetricReducer):
    """Weighted mean ``sum(w * v) / sum(w)`` of all values on all workers.

    Input per batch: ``{"values": array-like, "weights": array-like}``, both
    required, with the same number of elements (flattened); weights are finite
    and >= 0. ``cross_slot_reduce`` returns np.float64.

    Example:
        >>> reducer = WeightedMean()
        >>> state = reducer.accumulate({"values": [1.0, 4.0], "weights": [2.0, 1.0]})
        >>> float(reducer.cross_slot_reduce([state]))
        2.0
    """

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

    def accumulate(self, metric: Any) -> WeightedMeanState:
        """Adds one batch of weighted values.

        Args:
            metric: ``{"values": array-like, "weights": array-like}``.

        Returns:
            ``(count, sum_of_weights, sum_of_weighted_values)`` so far, where
            count is the number of values of nonzero weight.

        Raises:
            ValueError: On missing keys, NaN or inf, negative weights or
                mismatched sizes.
        """
        values, weights = validation.parse_weighted_values(type(self).__name__, metric)
        weights = weights.astype(np.float64, copy=False)
        self._count += int(np.count_nonzero(weights))
        self._weight += float(np.sum(weights))
        self._total += float(np.dot(weights, values.astype(np.float64, copy=False)))
        return np.int64(self._count), np.float64(self._weight), np.float64(self._total)

    def cross_slot_reduce(self, per_slot_metrics: list[WeightedMeanState]) -> np.float64:
        """Combines the weighted sums of all workers.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            The weighted mean as np.float64.

        Raises:
            ValueError: If no value of nonzero weight was accumulated.
        """
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, tuple)
        count = sum(int(state[0]) for state in states)
        if count == 0:
            raise validation.no_examples_error(name)
        weight = math.fsum(float(state[1]) for state in states)
        return np.float64(math.fsum(float(state[2]) for state in states) / weight)
