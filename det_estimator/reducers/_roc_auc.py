"""Exact ranking metrics (ROC AUC, average precision) over all workers' scores."""

import abc
import warnings
from typing import Any, Optional

import numpy as np

from det_estimator.reducers import _functional as functional
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer

_Batch = tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]


def _score_dtype(predictions: np.ndarray) -> np.ndarray:
    """Scores in the most compact dtype that keeps their order exactly."""
    if predictions.dtype in (np.float32, np.float64):
        return predictions
    if predictions.dtype == np.float16:
        return predictions.astype(np.float32)
    return predictions.astype(np.float64)


def _sorted_with_weights(scores: np.ndarray, weights: Optional[np.ndarray]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Scores in increasing order (NaN-free), with their weights in the same order."""
    if weights is None:
        return np.sort(scores), None
    order = np.argsort(scores, kind="stable")
    return scores[order], weights[order]


def _concatenate(batches: list[_Batch]) -> _Batch:
    """Joins per-batch (positives, negatives, positive weights, negative weights)."""
    if len(batches) == 1:
        return batches[0]
    if not batches:
        empty = np.empty(0, dtype=np.float32)
        return empty, empty, None, None
    positives = np.concatenate([batch[0] for batch in batches])
    negatives = np.concatenate([batch[1] for batch in batches])
    if all(batch[2] is None for batch in batches):
        return positives, negatives, None, None
    # Batches without weights count each example once.
    positive_weights = np.concatenate([np.ones(len(b[0]), np.float32) if b[2] is None else b[2] for b in batches])
    negative_weights = np.concatenate([np.ones(len(b[1]), np.float32) if b[3] is None else b[3] for b in batches])
    return positives, negatives, positive_weights, negative_weights


class ScoreSamples:
    """The state of :class:`RocAuc` and :class:`AveragePrecision`.

    Holds the scores of the positive and of the negative examples in two
    separate arrays, so labels take no memory, in the predictions' own dtype
    (float32 stays 4 bytes per example). Weights are kept only if some batch
    had weights; examples of weight 0 are not kept at all.

    Reducers return a lightweight view of their per-batch buffers: nothing is
    copied per batch, and the batches are concatenated once, on first access to
    the arrays or when the state is pickled.

    Args:
        positives: 1-D scores of the positive examples.
        negatives: 1-D scores of the negative examples.
        positive_weights: Weights of the positives, or None.
        negative_weights: Weights of the negatives, or None.
    """

    __slots__ = ("_buffer", "_size", "_arrays")

    def __init__(
        self,
        positives: np.ndarray,
        negatives: np.ndarray,
        positive_weights: Optional[np.ndarray] = None,
        negative_weights: Optional[np.ndarray] = None,
    ) -> None:
        if (positive_weights is None) != (negative_weights is None):
            raise ValueError("ScoreSamples: give weights for both classes or for neither.")
        scores = [np.asarray(positives).reshape(-1), np.asarray(negatives).reshape(-1)]
        weights = [None if w is None else np.asarray(w).reshape(-1) for w in (positive_weights, negative_weights)]
        if weights[0] is not None and (len(weights[0]), len(weights[1])) != (len(scores[0]), len(scores[1])):
            raise ValueError("ScoreSamples: weights and scores have different lengths.")
        self._buffer: Optional[list[_Batch]] = None
        self._size = 0
        self._arrays: Optional[_Batch] = (scores[0], scores[1], weights[0], weights[1])

    @classmethod
    def _view(cls, buffer: list[_Batch]) -> "ScoreSamples":
        """A state made of the batches currently in an append-only buffer."""
        state = cls.__new__(cls)
        # Later appends to the buffer do not change this view: it only reads the
        # batches present now.
        state._buffer = buffer
        state._size = len(buffer)
        state._arrays = None
        return state

    def _materialize(self) -> _Batch:
        if self._arrays is None:
            self._arrays = _concatenate(self._buffer[: self._size])
            self._buffer = None
        return self._arrays

    @property
    def positives(self) -> np.ndarray:
        """Scores of the positive examples."""
        return self._materialize()[0]

    @property
    def negatives(self) -> np.ndarray:
        """Scores of the negative examples."""
        return self._materialize()[1]

    @property
    def positive_weights(self) -> Optional[np.ndarray]:
        """Weights of the positive examples, or None if unweighted."""
        return self._materialize()[2]

    @property
    def negative_weights(self) -> Optional[np.ndarray]:
        """Weights of the negative examples, or None if unweighted."""
        return self._materialize()[3]

    @property
    def num_examples(self) -> int:
        """Number of examples held."""
        return len(self.positives) + len(self.negatives)

    def __reduce__(self) -> tuple[Any, _Batch]:
        return ScoreSamples, self._materialize()

    def __repr__(self) -> str:
        weighted = "weighted" if self.positive_weights is not None else "unweighted"
        return f"ScoreSamples({len(self.positives)} positives, {len(self.negatives)} negatives, {weighted})"


class _ScoreRankingReducer(MetricReducer, abc.ABC):
    """Keeps every example's score, split by class, and ranks them at the end."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forgets all accumulated batches."""
        # A new list, not clear(): views handed out earlier stay valid.
        self._buffer: list[_Batch] = []

    def accumulate(self, metric: Any) -> ScoreSamples:
        """Adds one batch of binary labels and scores.

        Args:
            metric: ``{"labels": 0/1 or bool, "predictions": scores, "weights":
                optional}``; arrays of the same number of elements.

        Returns:
            The :class:`ScoreSamples` of all batches so far.

        Raises:
            ValueError: On non-binary labels, NaN scores, invalid weights or
                mismatched sizes.
        """
        name = type(self).__name__
        batch = validation.parse_labeled_batch(name, metric, allow_inf_predictions=True)
        is_positive = validation.binary_labels(name, batch.labels)
        scores = _score_dtype(batch.predictions)
        weights = batch.weights
        if weights is not None:
            # Weight-0 examples (padding) change nothing: do not keep them.
            kept = weights > 0
            if not kept.all():
                scores, is_positive, weights = scores[kept], is_positive[kept], weights[kept]
        if scores.size:
            positive_weights = None if weights is None else weights[is_positive]
            negative_weights = None if weights is None else weights[~is_positive]
            positives, positive_weights = _sorted_with_weights(scores[is_positive], positive_weights)
            negatives, negative_weights = _sorted_with_weights(scores[~is_positive], negative_weights)
            # Each batch is kept sorted: the final sort in cross_slot_reduce then only merges
            # runs, and the cost of sorting is spread over the evaluation's batches.
            self._buffer.append((positives, negatives, positive_weights, negative_weights))
        return ScoreSamples._view(self._buffer)

    def cross_slot_reduce(self, per_slot_metrics: list[ScoreSamples]) -> np.float64:
        """Computes the metric over the examples of all workers.

        Args:
            per_slot_metrics: The final :class:`ScoreSamples` of each worker.

        Returns:
            The metric as np.float64; NaN, with a RuntimeWarning, if only one
            class occurs in the whole evaluation.

        Raises:
            ValueError: If there are no examples at all.
        """
        name = type(self).__name__
        states = validation.gather_states(name, per_slot_metrics, ScoreSamples)
        positives, negatives, positive_weights, negative_weights = _concatenate(
            [state._materialize() for state in states]
        )
        if len(positives) == 0 and len(negatives) == 0:
            raise validation.no_examples_error(name)
        if len(positives) == 0 or len(negatives) == 0:
            present = "positive" if len(positives) else "negative"
            warnings.warn(
                f"{name}: only {present} examples occur in the whole evaluation "
                f"({len(positives) + len(negatives)} examples of nonzero weight), so "
                f"{name} is undefined; returning NaN.",
                RuntimeWarning,
                stacklevel=2,
            )
            return np.float64(np.nan)
        return np.float64(self._compute(positives, negatives, positive_weights, negative_weights))

    @abc.abstractmethod
    def _compute(
        self,
        positives: np.ndarray,
        negatives: np.ndarray,
        positive_weights: Optional[np.ndarray],
        negative_weights: Optional[np.ndarray],
    ) -> float:
        """The metric from the scores of both classes, each non-empty."""


class RocAuc(_ScoreRankingReducer):
    """Exact area under the ROC curve of a binary classifier.

    Equal to ``sklearn.metrics.roc_auc_score(labels, scores,
    sample_weight=weights)``: tied scores get half credit. The AUC only depends
    on the order of the scores, so probabilities and logits give the same
    value. Each worker keeps the scores of its examples (see
    :class:`ScoreSamples`), 4 bytes per example for float32 scores, plus the
    weights when given.

    Input per batch: ``{"labels": 0/1 or bool, "predictions": scores,
    "weights": optional, >= 0}``, flattened. ``inf`` scores are allowed; NaN
    scores raise ValueError. Examples of weight 0 are dropped.

    ``cross_slot_reduce`` returns the AUC as np.float64, or NaN with a
    RuntimeWarning if the whole evaluation has a single class.

    Args:
        num_threads: Threads used to sort scores in ``cross_slot_reduce``; None
            uses the available CPUs (at most 8) for large evaluations.

    Example:
        >>> reducer = RocAuc()
        >>> state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.8, 0.3]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def __init__(self, num_threads: Optional[int] = None) -> None:
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise validation.invalid_argument("num_threads", "None or a positive integer", num_threads)
        self.num_threads = num_threads
        super().__init__()

    def _compute(
        self,
        positives: np.ndarray,
        negatives: np.ndarray,
        positive_weights: Optional[np.ndarray],
        negative_weights: Optional[np.ndarray],
    ) -> float:
        return functional.binary_roc_auc(
            positives, negatives, positive_weights, negative_weights, num_threads=self.num_threads
        )


class AveragePrecision(_ScoreRankingReducer):
    """Exact average precision (area under the precision-recall curve, step-wise).

    Equal to ``sklearn.metrics.average_precision_score(labels, scores,
    sample_weight=weights)``: tied scores form a single threshold. Input and
    state are those of :class:`RocAuc`.

    ``cross_slot_reduce`` returns the average precision as np.float64, or NaN
    with a RuntimeWarning if the whole evaluation has a single class (sklearn
    returns 1.0 for positives only and 0.0 for negatives only; a one-class
    evaluation almost always means a broken input pipeline, so it is flagged).

    Example:
        >>> reducer = AveragePrecision()
        >>> state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.8, 0.3]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def _compute(
        self,
        positives: np.ndarray,
        negatives: np.ndarray,
        positive_weights: Optional[np.ndarray],
        negative_weights: Optional[np.ndarray],
    ) -> float:
        return functional.binary_average_precision(positives, negatives, positive_weights, negative_weights)
