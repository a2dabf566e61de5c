"""The math of the exact ranking metrics (ROC AUC, average precision), as pure functions.

Scores become integer order keys (NumPy sorts integers faster than floats); each class is
sorted, on several threads for large inputs. When one class is much smaller than the other
(the usual case: few clicks among many impressions), only the smaller one is sorted: every
key of the larger class is then placed among it through a lookup table of its key range,
which costs a few passes over the larger class instead of sorting it.
"""

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

# Below this many scores, sorting is too quick for threads to pay off.
_PARALLEL_MIN_SCORES = 1 << 18
_MAX_THREADS = 8
_KEY_TYPES = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}
# The larger class is placed by lookup, rather than sorted, when it has this many times
# more examples than the smaller one; the table has about 16 buckets per smaller-class key.
_LOOKUP_RATIO = 8
_LOOKUP_BUCKET_BITS = 4
_MAX_LOOKUP_BITS = 22
# Keys placed by lookup per piece of work: bounds the memory of their ranks.
_LOOKUP_PIECE = 1 << 20


def order_keys(scores: np.ndarray) -> np.ndarray:
    """Maps floating point scores to integers that sort in the same order.

    NumPy sorts integers markedly faster than floats, and the ranking metrics
    only need the order of the scores, never their values. Equal scores get
    equal keys (``-0.0`` and ``0.0`` included). :func:`scores_from_keys` maps
    keys back to scores.

    Args:
        scores: NaN-free scores. float32 gives int32 keys, float64 gives int64
            keys; other dtypes are converted to float64 first.

    Returns:
        A new integer array, one key per score.
    """
    scores = np.asarray(scores)
    if scores.dtype not in (np.float32, np.float64):
        scores = scores.astype(np.float64)
    # Adding zero copies the array and turns -0.0 into +0.0, which compare equal
    # but have different bit patterns.
    return _flip_negatives((scores + scores.dtype.type(0)).view(_KEY_TYPES[scores.dtype]))


def _flip_negatives(bits: np.ndarray) -> np.ndarray:
    # IEEE-754 floats order like sign-magnitude integers: flipping the magnitude
    # bits of the negative ones makes two's-complement order match float order.
    # Flipping twice restores the bits, so the same function maps both ways.
    bits ^= (bits >> (8 * bits.dtype.itemsize - 1)) & np.iinfo(bits.dtype).max
    return bits


def scores_from_keys(keys: np.ndarray) -> np.ndarray:
    """The scores whose :func:`order_keys` are ``keys`` (a new array).

    Args:
        keys: int32 or int64 keys.

    Returns:
        float32 scores for int32 keys, float64 scores for int64 keys.
    """
    float_type = np.float32 if keys.dtype == np.int32 else np.float64
    return _flip_negatives(keys.copy()).view(float_type)


def class_keys(positives: np.ndarray, negatives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order keys of the scores of both classes, in one key dtype.

    Scores of both classes are keyed as float64 unless both are float32 (or float16).
    """
    dtype = np.result_type(np.asarray(positives).dtype, np.asarray(negatives).dtype, np.float32)
    return order_keys(np.asarray(positives, dtype)), order_keys(np.asarray(negatives, dtype))


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


def _slices(size: int, parts: int) -> list[slice]:
    """``parts`` contiguous slices of nearly equal length covering ``range(size)``."""
    bounds = [size * i // parts for i in range(parts + 1)]
    return [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]


def sort_keys(
    keys: np.ndarray, weights: Optional[np.ndarray] = None, *, num_threads: Optional[int] = None
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Sorts order keys, and their weights along, on several threads for large inputs.

    Each thread sorts a slice with NumPy's quicksort, then one stable sort (a
    timsort, which only merges the sorted slices) joins them. Equal keys may
    come out in any order, which no ranking metric can see.

    Args:
        keys: int32 or int64 keys; sorted in place when unweighted.
        weights: Per-key weights, or None.
        num_threads: Threads to use; None picks the number of available CPUs
            (at most 8) for large inputs and 1 for small ones.

    Returns:
        ``(keys, weights)`` in increasing order of the keys.
    """
    threads = min(_resolve_threads(num_threads, len(keys)), max(1, len(keys)))
    pieces = _slices(len(keys), threads)
    if weights is None:
        _parallel_map(lambda piece: keys[piece].sort(), pieces, threads)
        if threads > 1:
            keys.sort(kind="stable")
        return keys, None
    orders = _parallel_map(lambda piece: np.argsort(keys[piece]) + piece.start, pieces, threads)
    order = np.concatenate(orders)
    if threads > 1:
        order = order[np.argsort(keys[order], kind="stable")]
    return keys[order], weights[order]


def merge_sorted_runs(
    runs: Sequence[np.ndarray],
    weight_runs: Optional[Sequence[np.ndarray]] = None,
    *,
    num_threads: Optional[int] = None,
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Joins sorted arrays of keys (and their weights) into one sorted array.

    A stable sort of a concatenation (a timsort) finds the sorted runs and
    merges them in time proportional to ``n log(number of runs)``; arrays that
    are not sorted still come out sorted, only slower. Many runs are merged in
    groups on several threads first.

    Args:
        runs: Arrays of keys of one integer dtype, each expected sorted.
        weight_runs: The weights of each run, or None.
        num_threads: Threads to use; None decides from the input size.

    Returns:
        ``(keys, weights)`` in increasing order of the keys, in new arrays.
    """
    threads = min(_resolve_threads(num_threads, sum(len(run) for run in runs)), len(runs) // 2)
    if threads > 1:
        groups = _slices(len(runs), threads)
        merged = _parallel_map(
            lambda group: _merge_runs(runs[group], None if weight_runs is None else weight_runs[group]),
            groups,
            threads,
        )
        runs = [keys for keys, _ in merged]
        weight_runs = None if weight_runs is None else [weights for _, weights in merged]
    return _merge_runs(runs, weight_runs)


def _merge_runs(
    runs: Sequence[np.ndarray], weight_runs: Optional[Sequence[np.ndarray]]
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    keys = np.concatenate(runs)
    if weight_runs is None:
        return np.sort(keys, kind="stable"), None
    order = np.argsort(keys, kind="stable")
    return keys[order], np.concatenate(weight_runs)[order]


class _LookupTable(NamedTuple):
    """Buckets of equal key width over the range of sorted keys, to place other keys among them.

    ``entries[b + 1]`` is the number of sorted keys in the buckets before bucket ``b``,
    bitwise negated (so negative) when bucket ``b`` itself holds sorted keys; entries 0
    and -1 stand for keys below and above the range.
    """

    low: int
    high: int
    shift: int
    entries: np.ndarray


def _lookup_table(sorted_keys: np.ndarray) -> _LookupTable:
    low, high = int(sorted_keys[0]), int(sorted_keys[-1])
    bits = min(_MAX_LOOKUP_BITS, len(sorted_keys).bit_length() + _LOOKUP_BUCKET_BITS)
    shift = max(0, (high - low).bit_length() - bits)
    offsets = (np.asarray(sorted_keys, np.int64) - np.int64(low)).view(np.uint64)
    counts = np.bincount((offsets >> np.uint64(shift)).astype(np.intp), minlength=((high - low) >> shift) + 1)
    before = np.cumsum(counts) - counts
    entries = np.concatenate(([0], np.where(counts > 0, ~before, before), [len(sorted_keys)]))
    # int32 entries halve the table, which keys index at random.
    return _LookupTable(low, high, shift, entries.astype(np.int32 if len(sorted_keys) < 2**31 - 1 else np.int64))


def _slots(keys: np.ndarray, table: _LookupTable) -> np.ndarray:
    """The table entry of each key."""
    last = len(table.entries) - 1
    if keys.dtype == np.int32:
        # In int64 nothing overflows: keys below the range get negative buckets.
        slots = keys.astype(np.int64)
        slots -= table.low
        slots >>= table.shift
        np.clip(slots, -1, last - 1, out=slots)
        slots += 1
        return slots
    # Offsets of int64 keys may exceed int64: as uint64 they are exact once clipped.
    offsets = (np.clip(keys, table.low, table.high) - np.int64(table.low)).view(np.uint64)
    slots = (offsets >> np.uint64(table.shift)).astype(np.intp) + 1
    slots[keys < table.low] = 0
    slots[keys > table.high] = last
    return slots


def _ranks(sorted_keys: np.ndarray, table: _LookupTable, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``keys`` (any order): how many sorted keys are below it, and at most it.

    A key in a bucket without sorted keys is placed by the table alone; the others, in
    the buckets that hold sorted keys, by binary search.
    """
    left = table.entries[_slots(keys, table)].astype(np.intp)
    searched = np.flatnonzero(left < 0)
    searched_keys = keys[searched]
    searched_left = np.searchsorted(sorted_keys, searched_keys, "left")
    left[searched] = searched_left
    right = left.copy()
    tied = sorted_keys[np.minimum(searched_left, len(sorted_keys) - 1)] == searched_keys
    right[searched[tied]] = np.searchsorted(sorted_keys, searched_keys[tied], "right")
    return left, right


def _cumulative(weights: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``cumulative[i]`` is the total weight of the ``i`` smallest keys; None if unweighted."""
    if weights is None:
        return None
    return np.concatenate(([0.0], np.cumsum(weights, dtype=np.float64)))


def _twice_mass_below(
    left: np.ndarray, right: np.ndarray, hay_cumulative: Optional[np.ndarray], needle_weights: Optional[np.ndarray]
) -> float:
    """Sum over needles of weight * (2 * hay mass below it + hay mass equal to it)."""
    if hay_cumulative is None:
        # Python integers keep the count exact.
        return int(left.sum(dtype=np.int64)) + int(right.sum(dtype=np.int64))
    return float(np.dot(needle_weights, hay_cumulative[left] + hay_cumulative[right]))


def _sorted_ranks(hay: np.ndarray, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_ranks` for sorted needles, by binary search (sorted needles keep it in cache)."""
    left = np.searchsorted(hay, needles, "left")
    # Ties are rare with continuous scores: find them with one gather instead of
    # a second full binary search.
    tied = np.flatnonzero(hay[np.minimum(left, len(hay) - 1)] == needles)
    right = left.copy()
    right[tied] = np.searchsorted(hay, needles[tied], "right")
    return left, right


def fill_weights(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray],
    negative_weights: Optional[np.ndarray],
) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Both weight arrays, ones standing in for a missing one; or None and None."""
    if positive_weights is None and negative_weights is None:
        return None, None
    if positive_weights is None:
        positive_weights = np.ones(len(positives))
    if negative_weights is None:
        negative_weights = np.ones(len(negatives))
    return positive_weights, negative_weights


class _Placed(NamedTuple):
    """One class sorted (the hay), the other (the needles) to be placed among it."""

    hay: np.ndarray
    hay_weights: Optional[np.ndarray]
    needles: np.ndarray
    needle_weights: Optional[np.ndarray]
    table: Optional[_LookupTable]  # None when the needles are sorted too


def _place(
    hay: np.ndarray,
    hay_weights: Optional[np.ndarray],
    needles: np.ndarray,
    needle_weights: Optional[np.ndarray],
    presorted: bool,
    num_threads: Optional[int],
) -> _Placed:
    """Sorts the hay, and the needles unless a lookup table of the hay places them faster."""
    if not presorted:
        hay, hay_weights = sort_keys(hay, hay_weights, num_threads=num_threads)
        if len(needles) < _LOOKUP_RATIO * len(hay):
            needles, needle_weights = sort_keys(needles, needle_weights, num_threads=num_threads)
            presorted = True
    return _Placed(hay, hay_weights, needles, needle_weights, None if presorted else _lookup_table(hay))


def _placed_ranks(placed: _Placed, num_threads: Optional[int]) -> list[tuple[slice, np.ndarray, np.ndarray]]:
    """The ranks of the needles among the hay, by pieces: ``(piece, left, right)``."""
    threads = _resolve_threads(num_threads, len(placed.hay) + len(placed.needles))
    parts = max(threads, -(-len(placed.needles) // _LOOKUP_PIECE)) if placed.table is not None else threads

    def rank(piece: slice) -> tuple[slice, np.ndarray, np.ndarray]:
        if placed.table is None:
            return (piece, *_sorted_ranks(placed.hay, placed.needles[piece]))
        return (piece, *_ranks(placed.hay, placed.table, placed.needles[piece]))

    return _parallel_map(rank, _slices(len(placed.needles), parts), threads)


def roc_auc_of_keys(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    presorted: bool = False,
    num_threads: Optional[int] = None,
) -> float:
    """Exact area under the ROC curve, from the order keys of each class.

    The AUC is the probability that a random positive scores above a random
    negative, tied pairs counting one half (the trapezoidal ROC curve, as in
    ``sklearn.metrics.roc_auc_score``): every key of one class is placed among
    the sorted keys of the other.

    Args:
        positives: Order keys (:func:`order_keys`) of the positive examples.
        negatives: Order keys of the negative examples, of the same dtype.
        positive_weights: Weights of the positives in the same order, or None.
        negative_weights: Weights of the negatives, or None.
        presorted: Whether both classes are sorted already; else they are
            sorted here (unweighted keys in place).
        num_threads: Threads to use; None decides from the input size.

    Returns:
        The AUC, or NaN if a class is empty.
    """
    if len(positives) == 0 or len(negatives) == 0:
        return math.nan
    positive_weights, negative_weights = fill_weights(positives, negatives, positive_weights, negative_weights)
    placed, needles_are_negatives = _place_for_auc(
        positives, positive_weights, negatives, negative_weights, presorted, num_threads
    )
    hay_cumulative = _cumulative(placed.hay_weights)
    counts = [
        _twice_mass_below(left, right, hay_cumulative, _piece_of(placed.needle_weights, piece))
        for piece, left, right in _placed_ranks(placed, num_threads)
    ]
    # Placing the negatives among the positives counts the pairs where the negative
    # wins: those are then subtracted from all pairs.
    if positive_weights is None:
        # int / int rounds correctly.
        twice_pairs = 2 * len(positives) * len(negatives)
        twice_concordant = twice_pairs - sum(counts) if needles_are_negatives else sum(counts)
        return twice_concordant / twice_pairs
    positive_mass = float(np.sum(positive_weights, dtype=np.float64))
    twice_pairs = 2.0 * positive_mass * float(np.sum(negative_weights, dtype=np.float64))
    twice_concordant = math.fsum(counts)
    return (twice_pairs - twice_concordant if needles_are_negatives else twice_concordant) / twice_pairs


def _piece_of(weights: Optional[np.ndarray], piece: slice) -> Optional[np.ndarray]:
    return None if weights is None else weights[piece]


def _place_for_auc(
    positives: np.ndarray,
    positive_weights: Optional[np.ndarray],
    negatives: np.ndarray,
    negative_weights: Optional[np.ndarray],
    presorted: bool,
    num_threads: Optional[int],
) -> tuple[_Placed, bool]:
    """The classes placed one among the other; and whether the needles are the negatives.

    The smaller class is the hay of a lookup table when the larger one is much larger;
    otherwise both are sorted, and the smaller class is binary-searched in the larger.
    """
    small_is_positive = len(positives) <= len(negatives)
    small = (positives, positive_weights) if small_is_positive else (negatives, negative_weights)
    large = (negatives, negative_weights) if small_is_positive else (positives, positive_weights)
    if not presorted and len(large[0]) >= _LOOKUP_RATIO * len(small[0]):
        hay, hay_weights = sort_keys(*small, num_threads=num_threads)
        return _Placed(hay, hay_weights, *large, _lookup_table(hay)), small_is_positive
    if not presorted:
        small = sort_keys(*small, num_threads=num_threads)
        large = sort_keys(*large, num_threads=num_threads)
    return _Placed(*large, *small, None), not small_is_positive


def _suffix_sums(weights: Optional[np.ndarray], size: int) -> np.ndarray:
    """suffix[i] is the total weight of elements i.. of a sorted class; suffix[size] == 0."""
    if weights is None:
        return np.arange(size, -1, -1, dtype=np.int64)
    # Summing from the top, as sklearn does, keeps the small totals of the
    # highest thresholds free of cancellation.
    return np.concatenate((np.cumsum(weights[::-1], dtype=np.float64)[::-1], [0.0]))


def average_precision_of_keys(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    presorted: bool = False,
    num_threads: Optional[int] = None,
) -> float:
    """Exact average precision, from the order keys of each class.

    Matches ``sklearn.metrics.average_precision_score``: the sum over distinct
    score thresholds ``t`` of ``(R(t) - R(t_next_higher)) * P(t)``, where an
    example is predicted positive when its score is ``>= t``. Tied scores form
    a single threshold.

    Args:
        positives: Order keys (:func:`order_keys`) of the positive examples.
        negatives: Order keys of the negative examples, of the same dtype.
        positive_weights: Weights of the positives in the same order, or None.
        negative_weights: Weights of the negatives, or None.
        presorted: Whether both classes are sorted already; else they are
            sorted here (unweighted keys in place).
        num_threads: Threads to use; None decides from the input size.

    Returns:
        The average precision, or NaN if a class is empty.
    """
    if len(positives) == 0 or len(negatives) == 0:
        return math.nan
    positive_weights, negative_weights = fill_weights(positives, negatives, positive_weights, negative_weights)
    placed = _place(positives, positive_weights, negatives, negative_weights, presorted, num_threads)
    positives, positive_weights = placed.hay, placed.hay_weights
    # Only thresholds at a positive's score change the recall.
    starts = np.flatnonzero(np.concatenate(([True], positives[1:] != positives[:-1])))
    pos_suffix = _suffix_sums(positive_weights, len(positives))
    true_positives = pos_suffix[starts]
    false_positives = _negative_mass_from(placed, starts, num_threads)
    recall_steps = -np.diff(pos_suffix[np.append(starts, len(positives))])
    precision = true_positives / (true_positives + false_positives)
    return float(np.dot(recall_steps, precision) / pos_suffix[0])


def _negative_mass_from(placed: _Placed, starts: np.ndarray, num_threads: Optional[int]) -> np.ndarray:
    """Negative mass at or above each positive ``placed.hay[start]`` (positives are the hay)."""
    negatives, negative_weights = placed.needles, placed.needle_weights
    if placed.table is None:
        negative_suffix = _suffix_sums(negative_weights, len(negatives))
        return negative_suffix[np.searchsorted(negatives, placed.hay[starts], "left")]
    # A negative is below the positive at index j exactly when at most j positives are
    # at or below it: count negatives by that number.
    below = np.zeros(len(placed.hay) + 1)
    for piece, _, right in _placed_ranks(placed, num_threads):
        below += np.bincount(right, _piece_of(negative_weights, piece), len(below))
    total = len(negatives) if negative_weights is None else float(np.sum(negative_weights, dtype=np.float64))
    return total - np.cumsum(below)[starts]


def sort_classes(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    num_threads: Optional[int] = None,
) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]:
    """Sorted order keys of the scores of both classes (see :func:`class_keys`), with their weights."""
    positive_keys, negative_keys = class_keys(positives, negatives)
    positive_keys, positive_weights = sort_keys(positive_keys, positive_weights, num_threads=num_threads)
    negative_keys, negative_weights = sort_keys(negative_keys, negative_weights, num_threads=num_threads)
    return positive_keys, negative_keys, positive_weights, negative_weights


def binary_roc_auc(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    num_threads: Optional[int] = None,
) -> float:
    """Exact area under the ROC curve, from the scores of each class (:func:`roc_auc_of_keys`).

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
    keys = class_keys(positives, negatives)
    return roc_auc_of_keys(*keys, positive_weights, negative_weights, num_threads=num_threads)


def binary_average_precision(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    num_threads: Optional[int] = None,
) -> float:
    """Exact average precision, from the scores of each class (:func:`average_precision_of_keys`).

    Args:
        positives: Scores of the positive examples, 1-D, without NaN.
        negatives: Scores of the negative examples, 1-D, without NaN.
        positive_weights: Weights of the positives (> 0), or None for ones.
        negative_weights: Weights of the negatives (> 0), or None for ones.
        num_threads: Threads to use; None decides from the input size.

    Returns:
        The average precision, or NaN if a class is empty.
    """
    keys = class_keys(positives, negatives)
    return average_precision_of_keys(*keys, positive_weights, negative_weights, num_threads=num_threads)
