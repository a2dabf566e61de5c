"""Exact ranking metrics (ROC AUC, average precision) over all workers' scores."""

import abc
import warnings
from typing import Any, NamedTuple, Optional

import numpy as np

from det_estimator.reducers import _ranking as ranking
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer

# Batches are split by class in chunks of at least this many examples: one split of a
# large chunk costs far less than one per small batch.
_CHUNK_EXAMPLES = 1 << 16


class _Labeled(NamedTuple):
    """One batch as kept until its chunk is split: scores, labels, weights."""

    scores: np.ndarray
    is_positive: np.ndarray
    weights: Optional[np.ndarray]


class _Classes(NamedTuple):
    """Examples split by class: scores (or sorted keys) and weights of each class."""

    positives: np.ndarray
    negatives: np.ndarray
    positive_weights: Optional[np.ndarray]
    negative_weights: Optional[np.ndarray]


def _score_dtype(predictions: np.ndarray) -> np.ndarray:
    """A copy of the scores in the most compact dtype that keeps their order exactly."""
    if predictions.dtype in (np.float32, np.float64):
        return predictions.copy()
    if predictions.dtype == np.float16:
        return predictions.astype(np.float32)
    return predictions.astype(np.float64)


def _weights_or_ones(weights: list[Optional[np.ndarray]], sizes: list[int]) -> Optional[np.ndarray]:
    """The weights joined, ones standing in for unweighted parts; None if nothing is weighted."""
    if all(w is None for w in weights):
        return None
    return np.concatenate([np.ones(size, np.float32) if w is None else w for w, size in zip(weights, sizes)])


def _split_by_class(batches: list[_Labeled]) -> _Classes:
    scores = np.concatenate([batch.scores for batch in batches])
    is_positive = np.concatenate([batch.is_positive for batch in batches])
    weights = _weights_or_ones([batch.weights for batch in batches], [len(batch.scores) for batch in batches])
    is_negative = ~is_positive
    return _Classes(
        np.compress(is_positive, scores),
        np.compress(is_negative, scores),
        None if weights is None else np.compress(is_positive, weights),
        None if weights is None else np.compress(is_negative, weights),
    )


def _join(parts: list[_Classes]) -> _Classes:
    """Joins class-split parts; unweighted parts count each example once."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        empty = np.empty(0, np.float32)
        return _Classes(empty, empty, None, None)
    positives = [part.positives for part in parts]
    negatives = [part.negatives for part in parts]
    return _Classes(
        np.concatenate(positives),
        np.concatenate(negatives),
        _weights_or_ones([part.positive_weights for part in parts], [len(p) for p in positives]),
        _weights_or_ones([part.negative_weights for part in parts], [len(n) for n in negatives]),
    )


# (chunks split by class, how many of them, batches not yet split, how many of them)
_Snapshot = tuple[list[_Classes], int, list[_Labeled], int]


class _Batches:
    """A ranking reducer's examples: chunks split by class, then batches not yet split.

    ``chunks`` only grows, and a full ``pending`` list is replaced rather than emptied,
    so a (lists, lengths) pair taken at any time stays a valid snapshot.
    """

    def __init__(self) -> None:
        self.chunks: list[_Classes] = []
        self.pending: list[_Labeled] = []
        self.pending_examples = 0

    def add(self, batch: _Labeled) -> None:
        self.pending.append(batch)
        self.pending_examples += len(batch.scores)
        if self.pending_examples >= _CHUNK_EXAMPLES:
            self.chunks.append(_split_by_class(self.pending))
            self.pending = []
            self.pending_examples = 0

    def snapshot(self) -> _Snapshot:
        return self.chunks, len(self.chunks), self.pending, len(self.pending)


class ScoreSamples:
    """The state of :class:`RocAuc` and :class:`AveragePrecision`.

    Holds the scores of the positive and of the negative examples in two
    separate arrays, so labels take no memory, in the predictions' own dtype
    (float32 stays 4 bytes per example). Weights are kept only if some batch
    had weights; examples of weight 0 are not kept at all.

    Reducers return a lightweight view of their buffers: the scores are split
    by class per chunk of batches, and sorted once, on first access to the
    arrays or when the state is pickled, so each worker sorts its own examples
    before sending them; the arrays are then in increasing order of score. A
    process reducing its own state alone sorts only what the metric needs
    (with one class far smaller than the other, only that one).

    Args:
        positives: 1-D scores of the positive examples.
        negatives: 1-D scores of the negative examples.
        positive_weights: Weights of the positives, or None.
        negative_weights: Weights of the negatives, or None.
    """

    __slots__ = ("_snapshot", "_num_threads", "_sorted", "_sorted_here")

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
        is_positive = np.concatenate([np.ones(len(scores[0]), bool), np.zeros(len(scores[1]), bool)])
        weight = None if weights[0] is None else np.concatenate(weights)
        self._snapshot: Optional[_Snapshot] = ([], 0, [_Labeled(np.concatenate(scores), is_positive, weight)], 1)
        self._num_threads: Optional[int] = None
        self._sorted: Optional[_Classes] = None
        self._sorted_here = False

    @classmethod
    def _view(cls, batches: _Batches, num_threads: Optional[int]) -> "ScoreSamples":
        """A state made of the batches a reducer holds now; later batches do not change it."""
        state = cls.__new__(cls)
        state._snapshot = batches.snapshot()
        state._num_threads = num_threads
        state._sorted = None
        state._sorted_here = False
        return state

    @classmethod
    def _from_sorted_keys(cls, classes: _Classes) -> "ScoreSamples":
        """A state from the sorted order keys another worker sent."""
        state = cls.__new__(cls)
        state._snapshot = None
        state._num_threads = None
        state._sorted = classes
        state._sorted_here = False
        return state

    def _sorted_keys(self, num_threads: Optional[int] = None) -> tuple[_Classes, bool]:
        """The order keys of each class in increasing order, with their weights.

        Args:
            num_threads: Threads for sorting; None uses the reducer's setting.

        Returns:
            The keys and weights, and whether this process sorted them (keys
            that came over the network are sorted again by the merge, which
            costs one pass when they are sorted).
        """
        if self._sorted is None:
            classes = self._keys()
            threads = self._num_threads if num_threads is None else num_threads
            positives, positive_weights = ranking.sort_keys(classes[0], classes[2], num_threads=threads)
            negatives, negative_weights = ranking.sort_keys(classes[1], classes[3], num_threads=threads)
            self._sorted = _Classes(positives, negatives, positive_weights, negative_weights)
            self._snapshot = None
            self._sorted_here = True
        return self._sorted, self._sorted_here

    def _keys(self) -> _Classes:
        """The order keys of each class, in no particular order (new arrays), with their weights."""
        if self._sorted is not None:
            return self._sorted
        chunks, num_chunks, pending, num_pending = self._snapshot
        parts = chunks[:num_chunks] + ([_split_by_class(pending[:num_pending])] if num_pending else [])
        classes = _join(parts)
        return _Classes(*ranking.class_keys(classes.positives, classes.negatives), *classes[2:])

    @property
    def positives(self) -> np.ndarray:
        """Scores of the positive examples, in increasing order."""
        return ranking.scores_from_keys(self._sorted_keys()[0].positives)

    @property
    def negatives(self) -> np.ndarray:
        """Scores of the negative examples, in increasing order."""
        return ranking.scores_from_keys(self._sorted_keys()[0].negatives)

    @property
    def positive_weights(self) -> Optional[np.ndarray]:
        """Weights of the positive examples (in the order of their scores), or None if unweighted."""
        return self._sorted_keys()[0].positive_weights

    @property
    def negative_weights(self) -> Optional[np.ndarray]:
        """Weights of the negative examples, or None if unweighted."""
        return self._sorted_keys()[0].negative_weights

    @property
    def num_examples(self) -> int:
        """Number of examples held."""
        if self._sorted is not None:
            return len(self._sorted.positives) + len(self._sorted.negatives)
        chunks, num_chunks, pending, num_pending = self._snapshot
        in_chunks = sum(len(chunk.positives) + len(chunk.negatives) for chunk in chunks[:num_chunks])
        return in_chunks + sum(len(batch.scores) for batch in pending[:num_pending])

    def __reduce__(self) -> tuple[Any, tuple]:
        # Sorting before sending spreads the sorting over the workers: the receiver
        # only merges sorted runs.
        return _unpickle_sorted_keys, tuple(self._sorted_keys()[0])

    def __repr__(self) -> str:
        classes = self._sorted_keys()[0]
        weighted = "weighted" if classes.positive_weights is not None else "unweighted"
        return f"ScoreSamples({len(classes.positives)} positives, {len(classes.negatives)} negatives, {weighted})"


def _unpickle_sorted_keys(*classes: Any) -> ScoreSamples:
    return ScoreSamples._from_sorted_keys(_Classes(*classes))


def _common_key_dtype(parts: list[_Classes]) -> list[_Classes]:
    """Keys of float32 and float64 scores differ: re-key everything as float64 if both occur."""
    if len({part.positives.dtype for part in parts} | {part.negatives.dtype for part in parts}) == 1:
        return parts

    def widened(keys: np.ndarray) -> np.ndarray:
        return ranking.order_keys(ranking.scores_from_keys(keys).astype(np.float64))

    return [part._replace(positives=widened(part.positives), negatives=widened(part.negatives)) for part in parts]


def merge_states(states: list[ScoreSamples], num_threads: Optional[int]) -> _Classes:
    """The sorted keys and weights of both classes over all states."""
    parts = [state._sorted_keys(num_threads) for state in states]
    if len(parts) == 1 and parts[0][1]:
        return parts[0][0]
    return _merge_runs([part for part, _ in parts], num_threads)


def _merge_runs(runs: list[_Classes], num_threads: Optional[int]) -> _Classes:
    """Merges sorted keys of both classes into one sorted run per class."""
    runs = _common_key_dtype(runs)
    merged = []
    for keys, weights in (("positives", "positive_weights"), ("negatives", "negative_weights")):
        key_runs = [getattr(run, keys) for run in runs]
        weight_runs = [getattr(run, weights) for run in runs]
        if all(w is None for w in weight_runs):
            weight_runs = None
        else:
            # Unweighted runs count each example once.
            weight_runs = [np.ones(len(k)) if w is None else w for k, w in zip(key_runs, weight_runs)]
        merged.append(ranking.merge_sorted_runs(key_runs, weight_runs, num_threads=num_threads))
    (positives, positive_weights), (negatives, negative_weights) = merged
    if (positive_weights is None) != (negative_weights is None):
        # One class is weighted on some worker, the other nowhere: count the latter once.
        positive_weights, negative_weights = ranking.fill_weights(
            positives, negatives, positive_weights, negative_weights
        )
    return _Classes(positives, negatives, positive_weights, negative_weights)


class _ScoreRankingReducer(MetricReducer, abc.ABC):
    """Keeps every example's score, split by class, and ranks them at the end."""

    def __init__(self, num_threads: Optional[int] = None) -> None:
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise validation.invalid_argument("num_threads", "None or a positive integer", num_threads)
        self.num_threads = num_threads
        self.reset()

    def reset(self) -> None:
        """Forgets all accumulated batches."""
        # A new buffer, not a cleared one: views handed out earlier stay valid.
        self._batches = _Batches()

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
        batch = validation.parse_binary_batch(type(self).__name__, metric, allow_inf_predictions=True)
        scores, is_positive, weights = _score_dtype(batch.predictions), batch.is_positive, batch.weights
        if weights is not None:
            # Weight-0 examples (padding) change nothing: do not keep them.
            kept = weights > 0
            scores, is_positive, weights = scores[kept], is_positive[kept], weights[kept]
        if scores.size:
            # Copies: the caller may reuse its arrays for the next batch.
            self._batches.add(_Labeled(scores, is_positive.copy(), weights))
        return ScoreSamples._view(self._batches, self.num_threads)

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
        # This process's own state need not be sorted whole: the metric sorts what it needs.
        presorted = len(states) > 1 or states[0]._sorted is not None
        classes = merge_states(states, self.num_threads) if presorted else states[0]._keys()
        num_positives, num_negatives = len(classes.positives), len(classes.negatives)
        if num_positives == 0 and num_negatives == 0:
            raise validation.no_examples_error(name)
        if num_positives == 0 or num_negatives == 0:
            present = "positive" if num_positives else "negative"
            warnings.warn(
                f"{name}: only {present} examples occur in the whole evaluation "
                f"({num_positives + num_negatives} examples of nonzero weight), so "
                f"{name} is undefined; returning NaN.",
                RuntimeWarning,
                stacklevel=2,
            )
            return np.float64(np.nan)
        return np.float64(self._compute(classes, presorted))

    @abc.abstractmethod
    def _compute(self, classes: _Classes, presorted: bool) -> float:
        """The metric from the order keys of both classes (each non-empty), sorted or not."""


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
        num_threads: Threads used to sort and count scores; None uses the
            available CPUs (at most 8) for large evaluations.

    Example:
        >>> reducer = RocAuc()
        >>> state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.8, 0.3]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def _compute(self, classes: _Classes, presorted: bool) -> float:
        return ranking.roc_auc_of_keys(*classes, presorted=presorted, num_threads=self.num_threads)


class AveragePrecision(_ScoreRankingReducer):
    """Exact average precision (area under the precision-recall curve, step-wise).

    Equal to ``sklearn.metrics.average_precision_score(labels, scores,
    sample_weight=weights)``: tied scores form a single threshold. Input and
    state are those of :class:`RocAuc`.

    ``cross_slot_reduce`` returns the average precision as np.float64, or NaN
    with a RuntimeWarning if the whole evaluation has a single class (sklearn
    returns 1.0 for positives only and 0.0 for negatives only; a one-class
    evaluation almost always means a broken input pipeline, so it is flagged).

    Args:
        num_threads: Threads used to sort and count scores; None uses the
            available CPUs (at most 8) for large evaluations.

    Example:
        >>> reducer = AveragePrecision()
        >>> state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.8, 0.3]})
        >>> float(reducer.cross_slot_reduce([state]))
        1.0
    """

    def _compute(self, classes: _Classes, presorted: bool) -> float:
        return ranking.average_precision_of_keys(*classes, presorted=presorted, num_threads=self.num_threads)
