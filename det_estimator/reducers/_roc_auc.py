"""Exact ranking metrics (ROC AUC, average precision) over all workers' scores."""

import abc
import math
from typing import Any, Optional, Union

import numpy as np

from det_estimator.reducers import _ranking as ranking
from det_estimator.reducers import _validation as validation
from det_estimator.reducers._base import MetricReducer
from det_estimator.reducers._chunk_pool import key_arrays

# Batches are keyed in chunks of at least this many examples: one pass over a large
# chunk costs far less than one per small batch.
_CHUNK_EXAMPLES = 1 << 16
# What the native append_batch and key_batch return: the batch was added, the chunk being
# filled has no room for it, its scores leave no bit free for the labels (key_batch only).
_ADDED = 0
_NO_ROOM = 4
_NO_FREE_BIT = 5


class _ChunkBuffer:
    """The next chunk's examples, copied side by side as batches arrive, until it is full.

    Scores keep the dtype of the chunk's first batch (a batch of another dtype starts a
    new chunk); weights appear when the first weighted batch does, ones standing in for
    the batches before. Examples are only appended, so its first ``n`` examples, once
    written, never change: a (chunk, n) pair is a snapshot.
    """

    def __init__(self, score_dtype: np.dtype, capacity: int) -> None:
        self.scores = np.empty(capacity, score_dtype)
        self.is_positive = np.empty(capacity, bool)
        self.weights: Optional[np.ndarray] = None
        self.size = 0

    def has_room(self, score_dtype: np.dtype, size: int) -> bool:
        return score_dtype == self.scores.dtype and self.size + size <= len(self.scores)

    def append(self, scores: np.ndarray, is_positive: np.ndarray, weights: Optional[np.ndarray]) -> None:
        start, stop = self.size, self.size + len(scores)
        self.scores[start:stop] = scores
        self.is_positive[start:stop] = is_positive
        if weights is not None and self.weights is None:
            self.weights = np.ones(len(self.scores))
        if self.weights is not None:
            self.weights[start:stop] = 1.0 if weights is None else weights
        self.size = stop

    def is_full(self) -> bool:
        return self.size == len(self.scores)

    def examples(self, size: int) -> ranking.Examples:
        """Its first ``size`` examples, keyed (see ``ranking.labeled``; scores are copied)."""
        weights = None if self.weights is None else self.weights[:size]
        return ranking.labeled(self.scores[:size], self.is_positive[:size], weights)


class _KeyedChunk:
    """The next chunk's examples as labeled int32 keys, written by the native ``key_batch``.

    The common batch, unweighted float32 scores in (-2, 2), is keyed as it arrives: the keys
    are the state itself. Like a :class:`_ChunkBuffer`, it is only appended to.
    """

    def __init__(self, capacity: int) -> None:
        # A chunk of the usual size comes from the pool: the memory of an earlier evaluation's
        # chunk, if nothing refers to it any more, costs no page faults. A larger one (a batch
        # larger than a chunk) is of a size that seldom recurs.
        self.keys = key_arrays.take(capacity) if capacity == _CHUNK_EXAMPLES else np.empty(capacity, np.int32)
        self.size = 0

    def is_full(self) -> bool:
        return self.size == len(self.keys)

    def examples(self, size: int) -> ranking.Examples:
        """Its first ``size`` examples (a view)."""
        return ranking.Examples(self.keys[:size], None, None)


# (keyed chunks, how many of them, the chunk being filled, how many of its examples)
_Snapshot = tuple[list[ranking.Examples], int, Optional[Union[_ChunkBuffer, _KeyedChunk]], int]


class _Batches:
    """A ranking reducer's examples: keyed chunks, then the chunk being filled.

    ``chunks`` only grows and a filled chunk is replaced, never reused, so a snapshot
    taken at any time stays valid.
    """

    def __init__(self) -> None:
        self.chunks: list[ranking.Examples] = []
        self.filling: Optional[Union[_ChunkBuffer, _KeyedChunk]] = None
        # Until a batch's scores leave no bit free for the labels (logits, say): from then
        # on batches are copied and keyed a chunk at a time, not keyed one by one.
        self.keyable = True

    def add(self, scores: np.ndarray, is_positive: np.ndarray, weights: Optional[np.ndarray]) -> None:
        """Copies one batch in (converting its scores to ``ranking.score_dtype``)."""
        filling = self._room_for(ranking.score_dtype(scores.dtype), len(scores))
        filling.append(scores, is_positive, weights)
        if filling.is_full():
            self._key(filling)

    def add_if_valid(self, metric: Any) -> bool:
        """Checks and adds a batch of the usual form in one native pass; False if it is not one.

        The usual form: ``{"labels", "predictions"}`` as NumPy arrays of one size, labels 0
        and 1 of any integer, bool or float type, scores without NaN: float32 in (-2, 2),
        keyed straight into a :class:`_KeyedChunk`, or of the float type of an unweighted
        :class:`_ChunkBuffer` being filled, copied in. Anything else, an invalid batch
        included, is left to ``add`` after the thorough checks (which word the error). The
        per-batch Python here is kept to a minimum, as it runs for every batch: the kernel
        checks the types and the room left.
        """
        native = ranking.kernels
        if native is None:
            return False
        filling = self.filling
        if type(filling) is _KeyedChunk:
            # The common case, in one native call that also unpacks the dict; any other
            # outcome is sorted out below.
            end = native.key_metric(metric, filling.keys, filling.size)
            if end >= 0:
                filling.size = end
                return True
        if type(metric) is not dict:
            return False
        labels, scores = metric.get("labels"), metric.get("predictions")
        if type(labels) is not np.ndarray or type(scores) is not np.ndarray or len(metric) != 2:
            return False
        if type(filling) is _KeyedChunk:
            return self._key_in(native, labels, scores, filling)
        if filling is None and self.keyable:
            return self._key_in(native, labels, scores, filling)
        if not isinstance(filling, _ChunkBuffer) or filling.weights is not None:
            return False
        status = native.append_batch(labels, scores, filling.scores, filling.is_positive, filling.size)
        if status == _NO_ROOM:
            filling = self._room_for(filling.scores.dtype, scores.size)
            status = native.append_batch(labels, scores, filling.scores, filling.is_positive, filling.size)
        if status != _ADDED:
            return False  # another type, or invalid, or larger than a chunk
        filling.size += scores.size
        return True

    def _key_in(self, native: Any, labels: np.ndarray, scores: np.ndarray, filling: Optional[_KeyedChunk]) -> bool:
        """Keys a batch into the keyed chunk being filled (a new one if none or full); False if it cannot."""
        if filling is None:
            filling = self._new_keyed_chunk(scores.size)
        status = native.key_batch(labels, scores, filling.keys, filling.size)
        if status == _NO_ROOM and filling.size:
            self._key(filling)
            filling = self._new_keyed_chunk(scores.size)
            status = native.key_batch(labels, scores, filling.keys, filling.size)
        if status == _NO_FREE_BIT:
            self.keyable = False
        if status != _ADDED:
            return False
        filling.size += scores.size
        return True

    def _new_keyed_chunk(self, size: int) -> _KeyedChunk:
        self.filling = _KeyedChunk(max(_CHUNK_EXAMPLES, size))
        return self.filling

    def _room_for(self, score_dtype: np.dtype, size: int) -> "_ChunkBuffer":
        """The chunk being copied into, a new one if the current one cannot take ``size`` scores of ``score_dtype``."""
        filling = self.filling
        if filling is not None and not (isinstance(filling, _ChunkBuffer) and filling.has_room(score_dtype, size)):
            self._key(filling)
            filling = None
        if filling is None:
            filling = self.filling = _ChunkBuffer(score_dtype, max(_CHUNK_EXAMPLES, size))
        return filling

    def _key(self, filling: Union[_ChunkBuffer, _KeyedChunk]) -> None:
        """Keys the chunk being filled (``filling``) into ``chunks``; the next batch starts a new one."""
        if filling.size:
            self.chunks.append(filling.examples(filling.size))
        self.filling = None

    def snapshot(self) -> _Snapshot:
        filling = self.filling
        return self.chunks, len(self.chunks), filling, 0 if filling is None else filling.size


class ScoreSamples:
    """The state of :class:`RocAuc` and :class:`AveragePrecision`.

    Holds each example as one integer that sorts like its score, with the label in
    its lowest bit (see ``_ranking``): 4 bytes per example for float32 scores in
    (-2, 2), probabilities among them. Wider float32 scores keep their labels apart
    (5 bytes), float64 scores take 8 or 9. Weights are kept only if some batch had
    weights; examples of weight 0 are not kept at all.

    Reducers return a lightweight view of their buffers. A state travels unsorted:
    the reduction sorts the examples of every worker at once (merging runs sorted by
    each worker would cost a second sort), and a state's arrays are sorted on first
    access.

    Args:
        positives: 1-D scores of the positive examples.
        negatives: 1-D scores of the negative examples.
        positive_weights: Weights of the positives, or None.
        negative_weights: Weights of the negatives, or None.
    """

    __slots__ = ("_snapshot", "_num_threads", "_sorted", "_shares_chunks")

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
        weight: Optional[np.ndarray] = None
        if positive_weights is not None and negative_weights is not None:
            weights = [np.asarray(positive_weights).reshape(-1), np.asarray(negative_weights).reshape(-1)]
            if (len(weights[0]), len(weights[1])) != (len(scores[0]), len(scores[1])):
                raise ValueError("ScoreSamples: weights and scores have different lengths.")
            weight = np.concatenate(weights)
        is_positive = np.concatenate([np.ones(len(scores[0]), bool), np.zeros(len(scores[1]), bool)])
        examples = ranking.labeled(np.concatenate(scores), is_positive, weight)
        self._snapshot: Optional[_Snapshot] = ([examples], 1, None, 0)
        self._num_threads: Optional[int] = None
        self._sorted: Optional[ranking.Examples] = None
        self._shares_chunks = False

    @classmethod
    def _view(cls, batches: _Batches, num_threads: Optional[int]) -> "ScoreSamples":
        """A state made of the batches a reducer holds now; later batches do not change it."""
        state = cls.__new__(cls)
        state._snapshot = batches.snapshot()
        state._num_threads = num_threads
        state._sorted = None
        state._shares_chunks = True
        return state

    @classmethod
    def _from_parts(cls, parts: list[ranking.Examples]) -> "ScoreSamples":
        """A state from the examples another worker sent, in any order."""
        state = cls.__new__(cls)
        state._snapshot = (parts, len(parts), None, 0)
        state._num_threads = None
        state._sorted = None
        state._shares_chunks = False
        return state

    def _examples(self) -> ranking.Examples:
        """The examples, sorted if they already are, else in arrival order (possibly shared arrays)."""
        if self._sorted is not None:
            return self._sorted
        parts = self._parts()
        return ranking.join(parts) if parts else ranking.labeled(np.empty(0, np.float32), np.empty(0, bool))

    def _parts(self) -> list[ranking.Examples]:
        """The examples as the keyed chunks and the chunk being filled hold them (or sorted, once they are)."""
        if self._sorted is not None:
            return [self._sorted]
        chunks, num_chunks, filling, filled = self._unsorted()
        return chunks[:num_chunks] + ([filling.examples(filled)] if filling is not None and filled else [])

    def _unsorted(self) -> _Snapshot:
        """The snapshot of the batches, which a state holds until its examples are sorted."""
        assert self._snapshot is not None, "called after the examples were sorted"
        return self._snapshot

    def _sorted_examples(self) -> ranking.Examples:
        """The examples in increasing order of score (sorted on first use)."""
        if self._sorted is None:
            # A state of a single array is sorted in place: its order means nothing to anyone.
            # But keys a reducer keyed as batches arrived are a view of a chunk that other
            # states (earlier ones: a prefix; later ones: all of it) see too: sorted in place
            # they would hand those states some other examples. A large state is split into a
            # new array anyway, a range per thread.
            parts = self._parts()
            if self._shares_chunks and len(parts) == 1 and parts[0].keys.base is not None:
                parts = [parts[0]._replace(keys=parts[0].keys.copy())]
            self._sorted = ranking.sort_joined(parts, self._num_threads)
            self._snapshot = None
        return self._sorted

    def _class(self, positive: bool) -> tuple[np.ndarray, Optional[np.ndarray]]:
        examples = self._sorted_examples()
        members = ranking.labels_of(examples) == positive
        weights = None if examples.weights is None else examples.weights[members]
        return ranking.scores_from_keys(ranking.plain_keys(examples)[members]), weights

    @property
    def positives(self) -> np.ndarray:
        """Scores of the positive examples, in increasing order."""
        return self._class(True)[0]

    @property
    def negatives(self) -> np.ndarray:
        """Scores of the negative examples, in increasing order."""
        return self._class(False)[0]

    @property
    def positive_weights(self) -> Optional[np.ndarray]:
        """Weights of the positive examples (in the order of their scores), or None if unweighted."""
        return self._class(True)[1]

    @property
    def negative_weights(self) -> Optional[np.ndarray]:
        """Weights of the negative examples, or None if unweighted."""
        return self._class(False)[1]

    @property
    def num_examples(self) -> int:
        """Number of examples held."""
        if self._sorted is not None:
            return len(self._sorted.keys)
        chunks, num_chunks, _, filled = self._unsorted()
        return sum(len(chunk.keys) for chunk in chunks[:num_chunks]) + filled

    def __reduce__(self) -> tuple[Any, tuple]:
        # Unsorted, as they are: the receiver sorts every worker's examples at once.
        return ScoreSamples._from_parts, (self._parts(),)

    def __repr__(self) -> str:
        examples = self._sorted_examples()
        positives = int(np.count_nonzero(ranking.labels_of(examples)))
        weighted = "weighted" if examples.weights is not None else "unweighted"
        return f"ScoreSamples({positives} positives, {len(examples.keys) - positives} negatives, {weighted})"


class _ScoreRankingReducer(MetricReducer, abc.ABC):
    """Keeps every example's score, split by class, and ranks them at the end."""

    def __init__(self, num_threads: Optional[int] = None) -> None:
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise validation.invalid_argument("num_threads", "None or a positive integer", num_threads)
        self.num_threads = num_threads
        self.reset()

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON values (``ReducerMetric`` saves them with a Keras model)."""
        return {"num_threads": self.num_threads}

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
        if self._batches.add_if_valid(metric):
            return ScoreSamples._view(self._batches, self.num_threads)
        batch = validation.parse_binary_batch(type(self).__name__, metric, allow_inf_predictions=True)
        is_positive, scores, weights = batch
        if weights is not None:
            # Weight-0 examples (padding) change nothing: do not keep them.
            kept = weights > 0
            scores, is_positive, weights = scores[kept], is_positive[kept], weights[kept]
        if scores.size:
            # Copied: the caller may reuse its arrays for the next batch.
            self._batches.add(scores, is_positive, weights)
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
        # A state alone with examples is sorted as a state of its own, which keeps the chunks
        # it shares with the reducer's other states from being sorted in place under them.
        with_examples = [state for state in states if any(len(part.keys) for part in state._parts())]
        if len(with_examples) <= 1:
            examples = (with_examples or states)[0]._sorted_examples()
        else:
            # One sort of every worker's examples: as fast as of one state holding them all.
            parts = [part for state in states for part in state._parts()]
            examples = ranking.sort_joined(parts, self.num_threads)
        value = self._compute([examples])
        num_examples = len(examples.keys)
        if num_examples == 0:
            raise validation.no_examples_error(name)
        if math.isnan(value):
            num_positives = int(np.count_nonzero(ranking.labels_of(examples)))
            present = "positive" if num_positives else "negative"
            validation.warn_undefined(
                f"{name}: only {present} examples occur in the whole evaluation "
                f"({num_examples} examples of nonzero weight), so {name} is undefined; returning NaN."
            )
            return np.float64(np.nan)
        return np.float64(value)

    @abc.abstractmethod
    def _compute(self, sorted_ranges: list[ranking.Examples]) -> float:
        """The metric of sorted ranges of increasing scores (NaN if a class is empty)."""


class RocAuc(_ScoreRankingReducer):
    """Exact area under the ROC curve of a binary classifier.

    Equal to ``sklearn.metrics.roc_auc_score(labels, scores,
    sample_weight=weights)``: tied scores get half credit. The AUC only depends
    on the order of the scores, so probabilities and logits give the same
    value, but probabilities take less memory: each worker keeps its examples
    (see :class:`ScoreSamples`) in 4 bytes each for float32 scores in (-2, 2),
    5 for other float32 scores, plus the weights when given.

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

    def _compute(self, sorted_ranges: list[ranking.Examples]) -> float:
        return ranking.roc_auc(sorted_ranges, self.num_threads)


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

    def _compute(self, sorted_ranges: list[ranking.Examples]) -> float:
        return ranking.average_precision(sorted_ranges, self.num_threads)
