"""Exact ranking metrics when one class is rare: only that class is sorted.

Sorting every example is the fast way only where NumPy's sort is fast (its AVX-512
quicksort; without AVX-512, NumPy 1.26 sorts about ten times slower). There, for a
process ranking its own examples of which one class has at most 1/8 (few clicks among
many impressions), the rare class alone is sorted, and every example of the other class
is placed among it through a lookup table of its key range: a few passes over the large
class instead of a sort.
"""

import math
from typing import NamedTuple, Optional

import numpy as np

from det_estimator.reducers import _ranking as ranking

# The large class is placed by lookup when it has at least this many times more examples.
_LOOKUP_RATIO = 8
# The table has about 16 buckets per key of the rare class, and at most 2**22 entries.
_LOOKUP_BUCKET_BITS = 4
_MAX_LOOKUP_BITS = 22
# Keys placed per piece of work: bounds the memory of their ranks.
_LOOKUP_PIECE = 1 << 20


class _Classes(NamedTuple):
    """Order keys (and weights, or None) of each class, in no particular order."""

    positives: np.ndarray
    negatives: np.ndarray
    positive_weights: Optional[np.ndarray]
    negative_weights: Optional[np.ndarray]


def _split(examples: ranking.Examples) -> _Classes:
    is_positive = ranking.labels_of(examples)
    is_negative = ~is_positive
    keys = ranking.plain_keys(examples)
    weights = examples.weights
    return _Classes(
        np.compress(is_positive, keys),
        np.compress(is_negative, keys),
        None if weights is None else np.compress(is_positive, weights).astype(np.float64),
        None if weights is None else np.compress(is_negative, weights).astype(np.float64),
    )


def _rare(num_rare: int, num_common: int) -> bool:
    return num_rare > 0 and num_common >= _LOOKUP_RATIO * num_rare


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


class _Placed(NamedTuple):
    """The rare class sorted (the hay), the other (the needles) to be placed among it."""

    hay: np.ndarray
    hay_weights: Optional[np.ndarray]
    needles: np.ndarray
    needle_weights: Optional[np.ndarray]
    table: _LookupTable


def _placed(hay: np.ndarray, hay_weights: Optional[np.ndarray], needles, needle_weights) -> _Placed:
    if hay_weights is None:
        hay = np.sort(hay)
    else:
        order = np.argsort(hay)
        hay, hay_weights = hay[order], hay_weights[order]
    return _Placed(hay, hay_weights, needles, needle_weights, _lookup_table(hay))


def _placed_ranks(placed: _Placed, num_threads: Optional[int]) -> list[tuple[slice, np.ndarray, np.ndarray]]:
    """The ranks of the needles among the hay, by pieces: ``(piece, left, right)``."""
    threads = ranking.resolve_threads(num_threads, len(placed.hay) + len(placed.needles))
    parts = max(threads, -(-len(placed.needles) // _LOOKUP_PIECE))

    def rank(piece: slice) -> tuple[slice, np.ndarray, np.ndarray]:
        return (piece, *_ranks(placed.hay, placed.table, placed.needles[piece]))

    return ranking.parallel_map(rank, ranking.slices(len(placed.needles), parts), threads)


def _piece_of(weights: Optional[np.ndarray], piece: slice) -> Optional[np.ndarray]:
    return None if weights is None else weights[piece]


def roc_auc(examples: ranking.Examples, num_threads: Optional[int] = None) -> Optional[float]:
    """Exact ROC AUC of examples in any order when one class is rare; None when neither is.

    Every example of the large class is placed among the sorted rare class, and counts
    twice the rare mass below it plus the rare mass equal to it.

    Returns:
        The AUC; NaN if a class is empty; None if no class is rare.
    """
    classes = _split(examples)
    num_positives, num_negatives = len(classes.positives), len(classes.negatives)
    if num_positives == 0 or num_negatives == 0:
        return math.nan
    positives_are_rare = _rare(num_positives, num_negatives)
    if not positives_are_rare and not _rare(num_negatives, num_positives):
        return None
    positives, negatives, positive_weights, negative_weights = classes
    if positives_are_rare:
        placed = _placed(positives, positive_weights, negatives, negative_weights)
    else:
        placed = _placed(negatives, negative_weights, positives, positive_weights)
    counts: list[float] = []
    hay_cumulative = None if placed.hay_weights is None else np.concatenate(([0.0], np.cumsum(placed.hay_weights)))
    for piece, left, right in _placed_ranks(placed, num_threads):
        # Both classes are weighted, or neither.
        if hay_cumulative is None or placed.needle_weights is None:
            # Python integers keep the count exact.
            counts.append(int(left.sum(dtype=np.int64)) + int(right.sum(dtype=np.int64)))
        else:
            needle_weights = placed.needle_weights[piece]
            counts.append(float(np.dot(needle_weights, hay_cumulative[left] + hay_cumulative[right])))
    # Placing the negatives among the positives counts the pairs where the negative
    # wins: those are then subtracted from all pairs.
    if positive_weights is None or negative_weights is None:
        # int / int rounds correctly.
        twice_pairs = 2 * num_positives * num_negatives
        twice_concordant = twice_pairs - sum(counts) if positives_are_rare else sum(counts)
        return twice_concordant / twice_pairs
    twice_mass = 2.0 * float(np.sum(positive_weights)) * float(np.sum(negative_weights))
    twice_weighted = math.fsum(counts)
    return (twice_mass - twice_weighted if positives_are_rare else twice_weighted) / twice_mass


def average_precision(examples: ranking.Examples, num_threads: Optional[int] = None) -> Optional[float]:
    """Exact average precision of examples in any order when positives are rare; else None.

    Matches ``sklearn.metrics.average_precision_score`` (see ``ranking.average_precision``):
    the negatives are counted by how many positives are at or below each of them.

    Returns:
        The average precision; NaN if a class is empty; None if positives are not rare.
    """
    positives, negatives, positive_weights, negative_weights = _split(examples)
    if len(positives) == 0 or len(negatives) == 0:
        return math.nan
    if not _rare(len(positives), len(negatives)):
        return None
    placed = _placed(positives, positive_weights, negatives, negative_weights)
    positives, positive_weights = placed.hay, placed.hay_weights
    # Only thresholds at a positive's score change the recall.
    starts = np.flatnonzero(np.concatenate(([True], positives[1:] != positives[:-1])))
    if positive_weights is None:
        positive_suffix = np.arange(len(positives), -1, -1, dtype=np.int64)
    else:
        # Summing from the top, as sklearn does, keeps the small totals of the highest
        # thresholds free of cancellation.
        positive_suffix = np.concatenate((np.cumsum(positive_weights[::-1])[::-1], [0.0]))
    # A negative is below the positive at index j exactly when at most j positives are at
    # or below it: count negatives by that number.
    below = np.zeros(len(positives) + 1)
    for piece, _, right in _placed_ranks(placed, num_threads):
        below += np.bincount(right, _piece_of(negative_weights, piece), len(below))
    total_negative = len(negatives) if negative_weights is None else float(np.sum(negative_weights))
    false_positives = total_negative - np.cumsum(below)[starts]
    true_positives = positive_suffix[starts]
    recall_steps = -np.diff(positive_suffix[np.append(starts, len(positives))])
    precision = true_positives / (true_positives + false_positives)
    return float(np.dot(recall_steps, precision) / positive_suffix[0])
