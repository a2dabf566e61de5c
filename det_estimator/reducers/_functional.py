"""The math behind the built-in reducers, as pure functions of NumPy arrays.

The reducer classes are thin stateful wrappers: they validate batches, keep
small mergeable states and call these functions to turn merged states into
metric values. Nothing here validates its inputs; callers pass clean arrays.
"""

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import numpy as np

# Below this many scores, sorting is too quick for threads to pay off.
_PARALLEL_MIN_SCORES = 1 << 18
_MAX_THREADS = 8


def order_keys(scores: np.ndarray) -> np.ndarray:
    """Maps floating point scores to integers that sort in the same order.

    NumPy sorts integers markedly faster than floats, and the ranking metrics
    only need the order of the scores, never their values. Equal scores get
    equal keys (``-0.0`` and ``0.0`` included).

    Args:
        scores: NaN-free scores. float32 gives int32 keys, float64 gives int64
            keys; other dtypes are converted to float64 first.

    Returns:
        A new integer array, one key per score.
    """
    scores = np.asarray(scores)
    if scores.dtype not in (np.float32, np.float64):
        scores = scores.astype(np.float64)
    int_type = np.int32 if scores.dtype == np.float32 else np.int64
    sign_shift = 8 * scores.dtype.itemsize - 1
    # Adding zero copies the array and turns -0.0 into +0.0, which compare equal
    # but have different bit patterns.
    keys = (scores + scores.dtype.type(0)).view(int_type)
    # IEEE-754 floats order like sign-magnitude integers: flipping the magnitude
    # bits of the negative ones makes two's-complement order match float order.
    keys ^= (keys >> sign_shift) & np.iinfo(int_type).max
    return keys


def _resolve_threads(num_threads: Optional[int], size: int) -> int:
    if num_threads is not None:
        return max(1, int(num_threads))
    if size < _PARALLEL_MIN_SCORES:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # Not available on macOS.
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, _MAX_THREADS))


def _parallel_map(
    fn: Callable[[Any], Any], items: Sequence[Any], threads: int, cost: Optional[Callable[[Any], int]] = None
) -> list[Any]:
    """``[fn(item) for item in items]``, on ``threads`` threads, costliest items first.

    Starting the costliest items first keeps a short item from delaying the
    start of a long one until the other threads are idle (with 2 threads, the
    pieces 250k, 250k, 500k would otherwise take 1.5 times as long).
    """
    # NumPy releases the GIL while sorting and searching, so threads give real
    # parallelism here.
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    order = list(range(len(items)))
    if cost is not None:
        order.sort(key=lambda index: cost(items[index]), reverse=True)
    results: list[Any] = [None] * len(items)
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        for index, result in zip(order, pool.map(lambda index: fn(items[index]), order)):
            results[index] = result
    return results


class _SortedScores:
    """Sorted order keys of one class, with weights and their running sums."""

    def __init__(self, scores: np.ndarray, weights: Optional[np.ndarray]) -> None:
        keys = order_keys(scores)
        if weights is None:
            # Stable sort is timsort here, which merges the runs that accumulate() left
            # sorted per batch instead of sorting from scratch.
            keys.sort(kind="stable")
            self.weights = None
            self.cumulative = None
            self.total: float = len(keys)
        else:
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            self.weights = weights[order]
            # cumulative[i] is the total weight of the i smallest scores.
            self.cumulative = np.concatenate(([0.0], np.cumsum(self.weights, dtype=np.float64)))
            self.total = float(self.cumulative[-1])
        self.keys = keys


def _twice_mass_below(hay: _SortedScores, needle_keys: np.ndarray, needle_weights: Optional[np.ndarray]) -> float:
    """Sum over needles of weight * (2 * hay mass below it + hay mass equal to it)."""
    left = np.searchsorted(hay.keys, needle_keys, "left")
    # Ties are rare with continuous scores: find them with one gather instead of
    # a second full binary search.
    tied = hay.keys[np.minimum(left, len(hay.keys) - 1)] == needle_keys
    any_tied = bool(tied.any())
    if any_tied:
        right = np.searchsorted(hay.keys, needle_keys[tied], "right")
    if hay.cumulative is None:
        total = 2 * int(left.sum(dtype=np.int64))
        if any_tied:
            total += int((right - left[tied]).sum(dtype=np.int64))
        return total
    below = hay.cumulative[left]
    total = 2.0 * float(np.dot(needle_weights, below))
    if any_tied:
        total += float(np.dot(needle_weights[tied], hay.cumulative[right] - below[tied]))
    return total


def _concordance_tasks(negatives: _SortedScores, positives: _SortedScores, parts: int) -> tuple[list[tuple], bool]:
    """Binary searches whose results sum to the pair count of two sorted pieces.

    The smaller class is searched in the larger one, in ``parts`` slices that
    can run concurrently. Returns the tasks and whether the negatives are the
    needles, in which case the sum counts the complementary pairs.
    """
    flipped = len(positives.keys) > len(negatives.keys)
    hay, needles = (positives, negatives) if flipped else (negatives, positives)
    bounds = [len(needles.keys) * i // parts for i in range(parts + 1)]
    tasks = [
        (hay, needles.keys[a:b], None if needles.weights is None else needles.weights[a:b])
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    return tasks, flipped


def _fill_weights(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray],
    negative_weights: Optional[np.ndarray],
) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    if positive_weights is None and negative_weights is None:
        return None, None
    if positive_weights is None:
        positive_weights = np.ones(len(positives))
    if negative_weights is None:
        negative_weights = np.ones(len(negatives))
    return positive_weights, negative_weights


def _split(scores: np.ndarray, weights: Optional[np.ndarray], chunk: int) -> list[tuple]:
    pieces = max(1, -(-len(scores) // chunk))
    starts = [len(scores) * i // pieces for i in range(pieces + 1)]
    return [(scores[a:b], None if weights is None else weights[a:b]) for a, b in zip(starts[:-1], starts[1:])]


def binary_roc_auc(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    num_threads: Optional[int] = None,
) -> float:
    """Exact area under the ROC curve, from the scores of each class.

    The AUC is the probability that a random positive scores above a random
    negative, tied pairs counting one half (the trapezoidal ROC curve, as in
    ``sklearn.metrics.roc_auc_score``). Each class is sorted on its own; then
    every score of the smaller class is located among the sorted scores of the
    larger one by binary search. The classes may be split into chunks sorted
    concurrently: the pair count is a sum over pairs of chunks.

    Args:
        positives: Scores of the positive examples, 1-D, without NaN.
        negatives: Scores of the negative examples, 1-D, without NaN.
        positive_weights: Weights of the positives (> 0), or None for ones.
        negative_weights: Weights of the negatives (> 0), or None for ones.
        num_threads: Threads to use; None picks the number of available CPUs
            (at most 8) for large inputs and 1 for small ones.

    Returns:
        The AUC, or NaN if a class is empty.
    """
    if len(positives) == 0 or len(negatives) == 0:
        return math.nan
    positive_weights, negative_weights = _fill_weights(positives, negatives, positive_weights, negative_weights)
    size = len(positives) + len(negatives)
    threads = _resolve_threads(num_threads, size)
    chunk = -(-size // threads)
    pos_pieces = _split(positives, positive_weights, chunk)
    pieces = pos_pieces + _split(negatives, negative_weights, chunk)
    sorted_pieces = _parallel_map(
        lambda piece: _SortedScores(*piece), pieces, threads, cost=lambda piece: len(piece[0])
    )
    sorted_pos, sorted_neg = sorted_pieces[: len(pos_pieces)], sorted_pieces[len(pos_pieces) :]
    pairs = [(neg, pos) for neg in sorted_neg for pos in sorted_pos]
    searches, counts = [], []
    for neg, pos in pairs:
        pair_searches, flipped = _concordance_tasks(neg, pos, max(1, threads // len(pairs)))
        searches += [(-1 if flipped else 1, search) for search in pair_searches]
        if flipped:
            # Searching negatives among positives counts the pairs where the
            # negative wins: the searches are subtracted from all pairs.
            counts.append(2 * pos.total * neg.total)
    counts += _parallel_map(lambda search: search[0] * _twice_mass_below(*search[1]), searches, threads)
    if positive_weights is None:
        # Python integers keep the count exact and int / int rounds correctly.
        return sum(counts) / (2 * len(positives) * len(negatives))
    total_pos = sum(piece.total for piece in sorted_pos)
    total_neg = sum(piece.total for piece in sorted_neg)
    return math.fsum(counts) / (2.0 * total_pos * total_neg)


def _suffix_sums(weights: Optional[np.ndarray], size: int) -> np.ndarray:
    """suffix[i] is the total weight of elements i.. of a sorted class; suffix[size] == 0."""
    if weights is None:
        return np.arange(size, -1, -1, dtype=np.int64)
    # Summing from the top, as sklearn does, keeps the small totals of the
    # highest thresholds free of cancellation.
    return np.concatenate((np.cumsum(weights[::-1], dtype=np.float64)[::-1], [0.0]))


def binary_average_precision(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
) -> float:
    """Exact average precision, from the scores of each class.

    Matches ``sklearn.metrics.average_precision_score``: the sum over distinct
    score thresholds ``t`` of ``(R(t) - R(t_next_higher)) * P(t)``, where an
    example is predicted positive when its score is ``>= t``. Tied scores form
    a single threshold.

    Args:
        positives: Scores of the positive examples, 1-D, without NaN.
        negatives: Scores of the negative examples, 1-D, without NaN.
        positive_weights: Weights of the positives (> 0), or None for ones.
        negative_weights: Weights of the negatives (> 0), or None for ones.

    Returns:
        The average precision, or NaN if a class is empty.
    """
    if len(positives) == 0 or len(negatives) == 0:
        return math.nan
    positive_weights, negative_weights = _fill_weights(positives, negatives, positive_weights, negative_weights)
    pos = _SortedScores(positives, positive_weights)
    neg = _SortedScores(negatives, negative_weights)
    # Only thresholds at a positive's score change the recall.
    starts = np.flatnonzero(np.concatenate(([True], pos.keys[1:] != pos.keys[:-1])))
    pos_suffix = _suffix_sums(pos.weights, len(pos.keys))
    neg_suffix = _suffix_sums(neg.weights, len(neg.keys))
    true_positives = pos_suffix[starts]
    false_positives = neg_suffix[np.searchsorted(neg.keys, pos.keys[starts], "left")]
    recall_steps = -np.diff(pos_suffix[np.append(starts, len(pos.keys))])
    precision = true_positives / (true_positives + false_positives)
    return float(np.dot(recall_steps, precision) / pos_suffix[0])


def bin_counts(scores: np.ndarray, edges: np.ndarray, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Histogram of scores over the ``len(edges) + 1`` bins that edges delimit.

    Bin 0 holds scores below ``edges[0]``, bin ``i`` scores in
    ``[edges[i - 1], edges[i])`` and the last bin scores ``>= edges[-1]``.

    Args:
        scores: 1-D scores.
        edges: Strictly increasing 1-D bin edges.
        weights: Per-score weights, or None to count.

    Returns:
        int64 counts, or float64 sums of weights.
    """
    bins = np.searchsorted(edges, scores, "right")
    counts = np.bincount(bins, weights=weights, minlength=len(edges) + 1)
    return counts if weights is not None else counts.astype(np.int64, copy=False)


def binned_roc_auc(positive_counts: np.ndarray, negative_counts: np.ndarray) -> tuple[float, float]:
    """Approximate ROC AUC from per-bin histograms of each class.

    Pairs in different bins are ordered by their bins; pairs in the same bin
    get half credit. As the exact credit of a same-bin pair lies in [0, 1], the
    returned bound ``0.5 * sum_b pos_b * neg_b / (P * N)`` is a rigorous upper
    bound on the difference to the exact AUC.

    Args:
        positive_counts: Per-bin counts (or weights) of the positives.
        negative_counts: Per-bin counts (or weights) of the negatives.

    Returns:
        ``(auc, error_bound)``, both NaN if a class is empty.
    """
    pos = np.asarray(positive_counts, dtype=np.float64)
    neg = np.asarray(negative_counts, dtype=np.float64)
    pairs = pos.sum() * neg.sum()
    if pairs == 0:
        return math.nan, math.nan
    negatives_below = np.cumsum(neg) - neg
    same_bin = float(np.dot(pos, neg))
    auc = (float(np.dot(pos, negatives_below)) + 0.5 * same_bin) / pairs
    return auc, 0.5 * same_bin / pairs


def confusion_matrix(
    labels: np.ndarray, predicted: np.ndarray, num_classes: int, weights: Optional[np.ndarray] = None
) -> np.ndarray:
    """Confusion matrix, rows indexed by true class and columns by predicted class.

    Args:
        labels: int64 true class ids in ``[0, num_classes)``.
        predicted: int64 predicted class ids in ``[0, num_classes)``.
        num_classes: Number of classes.
        weights: Per-example weights, or None to count.

    Returns:
        ``[num_classes, num_classes]`` int64 counts, or float64 sums of weights.
    """
    counts = np.bincount(labels * num_classes + predicted, weights=weights, minlength=num_classes * num_classes)
    if weights is None:
        counts = counts.astype(np.int64, copy=False)
    return counts.reshape(num_classes, num_classes)


def _safe_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Divides elementwise, giving 0 where the denominator is 0 (zero_division=0)."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def precision_recall_f1(matrix: np.ndarray, average: str) -> tuple[float, float, float]:
    """Precision, recall and F1 from a confusion matrix.

    Args:
        matrix: Confusion matrix (rows: true class, columns: predicted class).
        average: "binary" (class 1 of a 2-class matrix), "micro" (global
            counts) or "macro" (unweighted mean over all classes, including
            classes that never occur). A ratio with a zero denominator is 0, as
            with sklearn's ``zero_division=0``.

    Returns:
        ``(precision, recall, f1)``.
    """
    true_pos = np.diag(matrix).astype(np.float64)
    predicted = matrix.sum(axis=0)
    actual = matrix.sum(axis=1)
    if average == "binary":
        true_pos, predicted, actual = true_pos[1:2], predicted[1:2], actual[1:2]
    elif average == "micro":
        true_pos, predicted, actual = (
            true_pos.sum(keepdims=True),
            predicted.sum(keepdims=True),
            actual.sum(keepdims=True),
        )
    precision = _safe_ratio(true_pos, predicted)
    recall = _safe_ratio(true_pos, actual)
    # 2 tp / (2 tp + fp + fn), sklearn's formulation, with fp + fn = predicted + actual - 2 tp.
    f1 = _safe_ratio(2 * true_pos, predicted + actual)
    return float(precision.mean()), float(recall.mean()), float(f1.mean())


def accuracy(matrix: np.ndarray) -> float:
    """Fraction (or weight fraction) of examples on the confusion matrix diagonal."""
    return float(np.trace(matrix) / matrix.sum())


def log_loss_terms(
    labels: np.ndarray, predictions: np.ndarray, *, from_logits: bool = False, eps: Optional[float] = None
) -> np.ndarray:
    """Per-example binary cross-entropy, in float64.

    Args:
        labels: bool labels.
        predictions: Probabilities of the positive class in [0, 1], or logits.
        from_logits: Whether predictions are logits. Logits use the stable
            ``max(x, 0) - x * y + log1p(exp(-|x|))`` and need no clipping.
        eps: Probabilities are clipped to ``[eps, 1 - eps]``; None uses the
            machine epsilon of the predictions' dtype, as sklearn's log_loss.

    Returns:
        float64 losses, one per example.
    """
    if from_logits:
        x = predictions.astype(np.float64)
        return np.maximum(x, 0.0) - x * labels + np.log1p(np.exp(-np.abs(x)))
    if eps is None:
        eps = float(np.finfo(predictions.dtype if predictions.dtype.kind == "f" else np.float64).eps)
    p = np.clip(predictions.astype(np.float64), eps, 1.0 - eps)
    return -np.where(labels, np.log(p), np.log1p(-p))


def weighted_moments(values: np.ndarray, weights: Optional[np.ndarray] = None) -> tuple[float, float, float]:
    """Total weight, weighted mean and weighted sum of squared deviations.

    Args:
        values: 1-D values.
        weights: Per-value weights, or None for ones.

    Returns:
        ``(sum_w, mean, m2)``, with ``m2 = sum w * (v - mean)**2``; all 0 if the
        total weight is 0.
    """
    values = values.astype(np.float64, copy=False)
    total = float(len(values)) if weights is None else float(np.sum(weights, dtype=np.float64))
    if total == 0:
        return 0.0, 0.0, 0.0
    if values.min() == values.max():
        # Constant values: an exact zero spread, which averaging could blur by
        # an ulp (R2 treats a zero total sum of squares specially).
        return total, float(values[0]), 0.0
    mean = float(np.average(values, weights=weights))
    deviations = values - mean
    squared = deviations * deviations
    m2 = float(squared.sum() if weights is None else np.dot(weights.astype(np.float64, copy=False), squared))
    return total, mean, m2


def merge_moments(a: tuple[float, float, float], b: tuple[float, float, float]) -> tuple[float, float, float]:
    """Merges two ``(sum_w, mean, m2)`` triples (Chan et al.'s parallel update).

    Merging centered moments avoids the cancellation of ``sum w*y**2 -
    (sum w*y)**2 / sum w`` when the mean is large compared to the spread.

    Returns:
        The ``(sum_w, mean, m2)`` of the union.
    """
    weight_a, mean_a, m2_a = a
    weight_b, mean_b, m2_b = b
    total = weight_a + weight_b
    if weight_a == 0 or weight_b == 0:
        return b if weight_a == 0 else a
    delta = mean_b - mean_a
    mean = mean_a + delta * (weight_b / total)
    return total, mean, m2_a + m2_b + delta * delta * (weight_a * weight_b / total)


def r2_from_sums(residual_sum_of_squares: float, total_sum_of_squares: float) -> float:
    """Coefficient of determination ``1 - SS_res / SS_tot``.

    Constant labels (``SS_tot == 0``) give 1.0 for perfect predictions and 0.0
    otherwise, as sklearn's r2_score with ``force_finite=True``.
    """
    if total_sum_of_squares == 0:
        return 1.0 if residual_sum_of_squares == 0 else 0.0
    return 1.0 - residual_sum_of_squares / total_sum_of_squares
