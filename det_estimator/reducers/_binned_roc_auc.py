"""Approximate ROC AUC from fixed-size per-class histograms of the scores."""

import math
import numbers
import warnings
from typing import Any, Optional, Union

import numpy as np

from det_estimator.reducers import _functional as functional
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer

_SCORE_KINDS = ("probabilities", "logits")
_VALUES = ("auc", "error_bound")
# Past ~36, 1 - sigmoid(x) is below float64 resolution and probability edges
# would collapse onto 1.0.
_MAX_LOGIT_RANGE = 30.0

BinnedState = tuple[np.ndarray, np.ndarray]


def _default_edges(bins: int, scores: str, logit_range: float) -> np.ndarray:
    """Edges uniform in logit space, expressed in the space of the scores."""
    logit_edges = np.linspace(-logit_range, logit_range, bins - 1)
    if scores == "logits":
        return logit_edges
    # Mapping the edges, rather than every score, into the other space keeps
    # the binning monotone by construction and costs nothing per example.
    return 1.0 / (1.0 + np.exp(-logit_edges))


def _validate_edges(bins: Any) -> np.ndarray:
    rule = "an integer >= 3 or a strictly increasing 1-D array of at least 2 finite edges"
    try:
        edges = np.asarray(bins, dtype=np.float64)
    except (TypeError, ValueError):
        raise validation.invalid_argument("bins", rule, bins) from None
    if edges.ndim != 1 or len(edges) < 2 or not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise validation.invalid_argument("bins", rule, bins)
    return edges


class BinnedRocAuc(MetricReducer):
    """ROC AUC approximated from per-bin counts of each class.

    Each worker keeps two histograms of ``bins`` fixed bins (positive and
    negative examples), so the state has a constant size whatever the number of
    examples, and states merge by summing. Pairs of examples in different bins
    are ordered by their bins; pairs in the same bin get half credit.

    By default the bins are uniform in logit space over ``[-logit_range,
    logit_range]``, plus two open-ended bins for scores beyond. Probability
    scores are binned against the sigmoid of these edges, which is the same as
    binning ``log(p) - log1p(-p)``: p = 0 falls in the first bin, p = 1 in the
    last. Probabilities crowded near 0 (rare positives) thus stay well
    resolved, unlike with thresholds uniform in [0, 1].

    ``bins`` may instead be an explicit strictly increasing array of edges, in
    the space of the scores given (e.g. ``np.linspace(0, 1, 201)`` emulates
    200 uniform probability thresholds). ``len(edges) + 1`` bins result: below
    the first edge, ``[edges[i], edges[i + 1])``, and at or above the last.

    Input per batch: ``{"labels": 0/1 or bool, "predictions": scores,
    "weights": optional, >= 0}``, flattened. Probabilities must lie in [0, 1].

    ``cross_slot_reduce`` returns the approximate AUC as np.float64 (NaN with a
    RuntimeWarning if a single class occurs) and stores in
    ``last_error_bound`` a rigorous bound on its distance to the exact AUC,
    ``0.5 * sum_b pos_b * neg_b / (P * N)``; :meth:`error_bound` computes the
    same bound for any list of states.

    Args:
        bins: Number of bins (int >= 3), or explicit edges.
        scores: "probabilities" or "logits": what the predictions are; used
            with an integer ``bins`` to place the logit-space edges, and to
            check that probabilities lie in [0, 1].
        logit_range: Half-width of the logit interval covered by the uniform
            bins, in (0, 30]; ignored with explicit edges.
        value: What ``cross_slot_reduce`` returns: "auc", or "error_bound" to
            report the bound as a metric of its own through ``make_metric``
            (which reduces a fresh copy of the reducer, so ``last_error_bound``
            of the instance passed to it stays unset).

    Example:
        >>> reducer = BinnedRocAuc()
        >>> state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.8, 0.3]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def __init__(
        self,
        bins: Union[int, np.ndarray] = 4096,
        scores: str = "probabilities",
        logit_range: float = 16.0,
        value: str = "auc",
    ) -> None:
        if value not in _VALUES:
            raise validation.invalid_argument("value", f"one of {list(_VALUES)}", value)
        if scores not in _SCORE_KINDS:
            raise validation.invalid_argument("scores", f"one of {list(_SCORE_KINDS)}", scores)
        if isinstance(logit_range, bool) or not isinstance(logit_range, numbers.Real):
            raise validation.invalid_argument("logit_range", f"a number in (0, {_MAX_LOGIT_RANGE:g}]", logit_range)
        if not 0 < logit_range <= _MAX_LOGIT_RANGE:
            raise validation.invalid_argument("logit_range", f"a number in (0, {_MAX_LOGIT_RANGE:g}]", logit_range)
        if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
            if bins < 3:
                raise validation.invalid_argument("bins", "an integer >= 3 or a strictly increasing 1-D array", bins)
            self.edges = _default_edges(int(bins), scores, float(logit_range))
        else:
            self.edges = _validate_edges(bins)
        self.scores = scores
        self.value = value
        self.logit_range = float(logit_range)
        self.last_error_bound: Optional[float] = None
        self.reset()

    @property
    def num_bins(self) -> int:
        """Number of bins of each histogram."""
        return len(self.edges) + 1

    def reset(self) -> None:
        """Zeroes the histograms."""
        self._positive = np.zeros(self.num_bins, dtype=np.int64)
        self._negative = np.zeros(self.num_bins, dtype=np.int64)

    def accumulate(self, metric: Any) -> BinnedState:
        """Adds one batch to the histograms.

        Args:
            metric: ``{"labels", "predictions", "weights" (optional)}``.

        Returns:
            ``(positive_counts, negative_counts)``: copies of the histograms so
            far, int64 counts, or float64 sums of weights once a batch had
            weights.

        Raises:
            ValueError: On non-binary labels, NaN scores, probabilities outside
                [0, 1], invalid weights or mismatched sizes.
        """
        name = type(self).__name__
        batch = validation.parse_labeled_batch(name, metric, allow_inf_predictions=True)
        is_positive = validation.binary_labels(name, batch.labels)
        scores = batch.predictions
        if self.scores == "probabilities":
            validation.check_probabilities(name, "predictions", scores)
        weights = batch.weights
        positive_weights = None if weights is None else weights[is_positive]
        negative_weights = None if weights is None else weights[~is_positive]
        # Adding float64 weight sums to int64 counts promotes the state to float64.
        self._positive = self._positive + functional.bin_counts(scores[is_positive], self.edges, positive_weights)
        self._negative = self._negative + functional.bin_counts(scores[~is_positive], self.edges, negative_weights)
        return self._positive.copy(), self._negative.copy()

    def _merge(self, per_slot_metrics: list[BinnedState]) -> BinnedState:
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, tuple)
        positive = np.zeros(self.num_bins, dtype=np.int64)
        negative = np.zeros(self.num_bins, dtype=np.int64)
        for state in states:
            if len(state) != 2 or any(np.shape(h) != (self.num_bins,) for h in state):
                raise ValueError(
                    f"{name}: expected states (positive_counts, negative_counts) of {self.num_bins} bins each, "
                    "as returned by accumulate() of a reducer with the same bins."
                )
            positive = positive + state[0]
            negative = negative + state[1]
        if positive.sum() == 0 and negative.sum() == 0:
            raise validation.no_examples_error(name)
        return positive, negative

    def error_bound(self, per_slot_metrics: list[BinnedState]) -> np.float64:
        """Upper bound on |binned AUC - exact AUC| for these states.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            ``0.5 * sum_b pos_b * neg_b / (P * N)``; NaN if a class is absent.
        """
        return np.float64(functional.binned_roc_auc(*self._merge(per_slot_metrics))[1])

    def cross_slot_reduce(self, per_slot_metrics: list[BinnedState]) -> np.float64:
        """Sums the histograms of all workers and computes the AUC.

        Also sets ``last_error_bound``.

        Args:
            per_slot_metrics: The final states of all workers.

        Returns:
            The approximate AUC as np.float64 (the error bound with
            ``value="error_bound"``); NaN, with a RuntimeWarning, if only one
            class occurs in the whole evaluation.

        Raises:
            ValueError: If there are no examples at all.
        """
        auc, bound = functional.binned_roc_auc(*self._merge(per_slot_metrics))
        self.last_error_bound = bound
        if math.isnan(auc):
            name = type(self).__name__
            warnings.warn(
                f"{name}: only one class occurs in the whole evaluation, so {name} is undefined; returning NaN.",
                RuntimeWarning,
                stacklevel=2,
            )
        return np.float64(bound if self.value == "error_bound" else auc)
