"""The math of the exact ranking metrics (ROC AUC, average precision), as pure functions.

Every example becomes one integer: the order key of its score (integers sort faster than
floats, in the same order) shifted left by one bit, with its label in the freed bit. One
``np.sort`` of those "labeled keys" orders the examples by score, negatives before
positives among equal scores, without an argsort or a split by class; each metric is then
one pass over the sorted labels. Scores whose keys need every bit of their type (float32
scores outside (-2, 2)) keep their labels beside the keys and are embedded in int64 keys
only while they are sorted.

The sorted runs of several workers are cut at common scores into ranges, each joined and
sorted on a thread of its own. The metrics are counted in cache-sized blocks of whole
groups of equal scores, on every CPU; pairs across blocks are counted from their totals.
The common case, unweighted examples whose labels ride in the keys, is sorted and counted
by native kernels (``_ranking_kernels.c``, built with the package): a radix sort that takes
the same time on every CPU, and one pass per metric. Without them (a build without a C
compiler) NumPy does the same work, on the same path: ``np.sort`` and array passes.
"""

import math
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

try:
    from det_estimator.reducers import _ranking_kernels

    kernels: Optional[ModuleType] = _ranking_kernels
except ImportError:  # Built without a C compiler: NumPy does the same work, slower.
    kernels = None

# Below this many examples, ranking is too quick for threads to pay off.
_PARALLEL_MIN_EXAMPLES = 1 << 18
_MAX_THREADS = 8
_KEY_TYPES = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}
_UNSIGNED = {np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64}
# Positions of 0/1 labels are summed in blocks small enough that every partial sum of a
# block is an integer below 2**24, which float32 BLAS adds exactly.
_POSITION_BLOCK = 4096
# Examples sampled per range to choose the scores where ranges are cut.
_PIVOT_SAMPLES = 256
# The metrics are counted in blocks of about this many examples.
_BLOCK = 1 << 17
# Average precision takes the positions of a block's positives when fewer than one
# example in this many is positive, else a precision at every example (see _precision_sum).
_DENSE_SHARE = 4


class Examples(NamedTuple):
    """Labeled examples as integers that sort by score.

    Attributes:
        keys: With ``labels`` None, labeled keys: ``order_key << 1 | label``. Otherwise
            the order keys alone. int32 keys are of float32 scores, int64 keys of float64.
        labels: bool labels, or None when they are bit 0 of ``keys``.
        weights: Weights, one per example, or None when unweighted.
    """

    keys: np.ndarray
    labels: Optional[np.ndarray]
    weights: Optional[np.ndarray]


def order_keys(scores: np.ndarray) -> np.ndarray:
    """Maps floating point scores to integers that sort in the same order.

    NumPy sorts integers markedly faster than floats, and the ranking metrics
    only need the order of the scores, never their values. Equal scores get
    equal keys (``-0.0`` and ``0.0`` included). :func:`scores_from_keys` maps
    keys back to scores.

    Args:
        scores: NaN-free scores. float32 and float16 give int32 keys, others int64
            keys (see :func:`score_dtype`).

    Returns:
        A new integer array, one key per score.
    """
    return _keys_and_range(scores)[0]


def _keys_and_range(scores: np.ndarray) -> tuple[np.ndarray, int, int]:
    """:func:`order_keys` of the scores, and the smallest and largest key (0 and 0 if none)."""
    scores = np.asarray(scores)
    scores = scores.astype(score_dtype(scores.dtype), copy=False)
    # Adding zero copies the array and turns -0.0 into +0.0, which compare equal
    # but have different bit patterns.
    keys = (scores + scores.dtype.type(0)).view(_KEY_TYPES[scores.dtype])
    if len(keys) == 0:
        return keys, 0, 0
    low = int(keys.min())
    if low < 0:
        # Only negative scores need flipping (probabilities never do).
        keys = _flip_negatives(keys)
        low = int(keys.min())
    return keys, low, int(keys.max())


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


def score_dtype(dtype: np.dtype) -> np.dtype:
    """The float dtype that scores of ``dtype`` are keyed in: float32 for float16, float64 for non-floats."""
    if dtype in (np.float32, np.float64):
        return np.dtype(dtype)
    return np.dtype(np.float32 if dtype == np.float16 else np.float64)


def labeled(scores: np.ndarray, is_positive: np.ndarray, weights: Optional[np.ndarray] = None) -> Examples:
    """Examples from scores, bool labels and optional weights (all 1-D, of one length).

    float32 and float16 scores give int32 keys, others int64 keys (see :func:`order_keys`;
    the scores are copied). The labels are embedded in the keys when the keys leave a bit
    free, scores in (-2, 2), which keeps float32 probabilities in 4 bytes each.
    """
    if kernels is not None and scores.dtype == np.float32 and is_positive.dtype == bool and scores.ndim == 1:
        # One native pass instead of NumPy's five; False when a key leaves no bit free.
        keys = np.empty(len(scores), np.int32)
        if kernels.label_keys(np.ascontiguousarray(scores), np.ascontiguousarray(is_positive), keys):
            return Examples(keys, None, weights)
    keys, low, high = _keys_and_range(scores)
    limit = 1 << (8 * keys.dtype.itemsize - 2)
    if low < -limit or high >= limit:
        return Examples(keys, is_positive.astype(bool), weights)
    keys <<= 1
    keys |= is_positive
    return Examples(keys, None, weights)


def plain_keys(examples: Examples) -> np.ndarray:
    """The order keys of the examples' scores (a view when the labels are apart)."""
    return examples.keys if examples.labels is not None else examples.keys >> 1


def labels_of(examples: Examples) -> np.ndarray:
    """The labels, as bool (a view when they are apart)."""
    return examples.labels if examples.labels is not None else (examples.keys & 1).astype(bool)


def _widened(examples: Examples) -> Examples:
    """Examples of float32 scores re-keyed as float64 scores, labels apart."""
    keys = order_keys(scores_from_keys(plain_keys(examples)).astype(np.float64))
    return Examples(keys, labels_of(examples), examples.weights)


def common_form(parts: Sequence[Examples]) -> list[Examples]:
    """The parts in one form: one key dtype, labels embedded in all or in none, weights in all or none.

    Parts that differ are re-keyed with their labels apart (float64 keys if any part has
    them); unweighted parts then count each example once. Each part keeps its order.
    """
    parts = list(parts)
    weighted = [part.weights is not None for part in parts]
    if any(weighted) and not all(weighted):
        parts = [part if part.weights is not None else part._replace(weights=np.ones(len(part.keys))) for part in parts]
    if len({(part.keys.dtype, part.labels is None) for part in parts}) <= 1:
        return parts
    wide = any(part.keys.dtype == np.int64 for part in parts)
    apart = [Examples(plain_keys(part), labels_of(part), part.weights) for part in parts]
    return [_widened(part) if wide and part.keys.dtype == np.int32 else part for part in apart]


def join(parts: Sequence[Examples]) -> Examples:
    """One array of examples from several (in one form, see :func:`common_form`), in their order."""
    parts = common_form(parts)
    if len(parts) == 1:
        return parts[0]
    keys = np.concatenate([part.keys for part in parts])
    labels = None if parts[0].labels is None else np.concatenate([part.labels for part in parts])
    weights = None if parts[0].weights is None else np.concatenate([part.weights for part in parts])
    return Examples(keys, labels, weights)


def sort(examples: Examples) -> Examples:
    """The examples in increasing order of score, negatives first among equal scores.

    Unweighted labeled keys are sorted in place; everything else is sorted into new arrays.
    """
    keys, labels, weights = examples
    if labels is None:
        if weights is None:
            _sort_in_place(keys)
            return examples
        order = np.argsort(keys)
        return Examples(keys[order], None, weights[order])
    if keys.dtype == np.int32:
        # The labels fit beside int32 keys in int64 while sorting.
        wide = (keys.astype(np.int64) << 1) | labels
        if weights is None:
            _sort_in_place(wide)
            return Examples((wide >> 1).astype(np.int32), (wide & 1).astype(bool), None)
        order = np.argsort(wide)
    else:
        # float64 scores outside (-2, 2): no integer holds the key and the label.
        order = np.lexsort((labels, keys))
    return Examples(keys[order], labels[order], None if weights is None else weights[order])


def _sort_in_place(keys: np.ndarray) -> None:
    """Sorts int32 or int64 keys in place: by the native radix sort where it is built."""
    if kernels is not None:
        kernels.sort(keys)
    else:
        keys.sort()


def sort_joined(parts: Sequence[Examples], num_threads: Optional[int] = None) -> Examples:
    """The examples of several parts, joined and sorted (see :func:`sort`), on several threads if large.

    With the native kernels, unweighted labeled keys are split at sampled scores straight
    from the parts into one new array, a range for each thread, and each range is then
    radix-sorted on a thread of its own. The parts are counted and split by groups, a group
    on each thread, every group writing to places of its own. Otherwise the parts are
    joined and sorted by :func:`sort`.
    """
    parts = [part for part in common_form(parts) if len(part.keys)]
    size = sum(len(part.keys) for part in parts)
    threads = resolve_threads(num_threads, size)
    native = kernels
    if native is None or threads == 1 or not parts or not all(_kernels_for(part) for part in parts):
        return sort(join(parts)) if parts else Examples(np.empty(0, np.int32), None, None)
    bounds = _pivots(parts, threads).astype(np.int64) << 1  # as labeled keys
    groups = [parts[piece] for piece in slices(len(parts), min(threads, len(parts)))]

    def count(group: list[Examples]) -> np.ndarray:
        counts = np.zeros(len(bounds) + 1, np.int64)
        for part in group:
            native.count_parts(part.keys, bounds, counts)
        return counts

    counts = np.array(parallel_map(count, groups, threads))  # [group, range]
    # Range j holds the keys of range j of each group, the groups in order.
    range_sizes = counts.sum(axis=0)
    range_starts = np.cumsum(range_sizes) - range_sizes
    group_starts = range_starts + np.cumsum(counts, axis=0) - counts
    keys = np.empty(size, parts[0].keys.dtype)

    def split(group: int) -> None:
        offsets = group_starts[group].copy()
        for part in groups[group]:
            native.split_parts(part.keys, bounds, keys, offsets, group_starts[group] + counts[group])

    parallel_map(split, range(len(groups)), threads)
    scratch = np.empty_like(keys)
    ranges = [slice(start, start + count) for start, count in zip(range_starts.tolist(), range_sizes.tolist())]
    sort_range = lambda piece: native.sort(keys[piece], scratch[piece])  # noqa: E731
    parallel_map(sort_range, ranges, threads, cost=lambda piece: piece.stop - piece.start)
    return Examples(keys, None, None)


def available_cpus() -> int:
    """The CPUs this process may run on (at most 8: more do not pay off here)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # Not available on macOS.
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, _MAX_THREADS))


def resolve_threads(num_threads: Optional[int], size: int) -> int:
    """Threads for ``size`` examples: ``num_threads``, or the available CPUs for large inputs."""
    if num_threads is not None:
        return max(1, int(num_threads))
    return 1 if size < _PARALLEL_MIN_EXAMPLES else available_cpus()


def parallel_map(
    fn: Callable[[Any], Any], items: Sequence[Any], threads: int, cost: Optional[Callable[[Any], int]] = None
) -> list[Any]:
    """``[fn(item) for item in items]``, on ``threads`` threads, costliest items first.

    Starting the costliest items first keeps a short item from delaying the
    start of a long one until the other threads are idle (with 2 threads, the
    pieces 250k, 250k, 500k would otherwise take 1.5 times as long).
    """
    # NumPy releases the GIL while sorting and in its array loops, so threads give
    # real parallelism here.
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    order = list(range(len(items)))
    if cost is not None:
        order.sort(key=lambda index: cost(items[index]), reverse=True)
    results: list[Any] = [None] * len(items)
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        for index, result in zip(order, pool.map(lambda index: fn(items[index]), order)):
            results[index] = result
    return results


def _each_column(examples: Examples, take: Callable[[np.ndarray], np.ndarray]) -> Examples:
    """``take`` applied to each column of the examples (labels and weights when present)."""
    keys, labels, weights = examples
    return Examples(take(keys), None if labels is None else take(labels), None if weights is None else take(weights))


def _rows(examples: Examples, start: int, stop: int) -> Examples:
    """Examples ``start`` to ``stop`` (views)."""
    return _each_column(examples, lambda column: column[start:stop])


def _pivots(runs: Sequence[Examples], parts: int) -> np.ndarray:
    """``parts - 1`` increasing order keys that cut runs into ranges of about equal size."""
    total = sum(len(run.keys) for run in runs)
    step = max(1, total // (parts * _PIVOT_SAMPLES))
    sample = np.sort(np.concatenate([plain_keys(_every(run, step)) for run in runs]))
    return np.unique(sample[(np.arange(1, parts) * len(sample)) // parts])


def _every(examples: Examples, step: int) -> Examples:
    """Every ``step``-th example (views)."""
    return _each_column(examples, lambda column: column[::step])


def _cut(run: Examples, pivots: np.ndarray) -> list[Examples]:
    """A sorted run cut before each pivot key: every range holds whole groups of equal scores."""
    bounds = pivots << 1 if run.labels is None else pivots
    cuts = [0, *np.searchsorted(run.keys, bounds.astype(run.keys.dtype), "left").tolist(), len(run.keys)]
    return [_rows(run, start, stop) for start, stop in zip(cuts[:-1], cuts[1:])]


def ranges(runs: Sequence[Examples], num_threads: Optional[int] = None) -> list[Examples]:
    """The examples of sorted runs (in one form) as sorted ranges of increasing scores.

    Equal scores never straddle two ranges. A single run is its own range; several runs
    are cut at common scores, and the pieces of each range joined and sorted, one range
    per thread.

    Args:
        runs: Sorted examples (see :func:`sort`), in one form (see :func:`common_form`).
        num_threads: Threads to use; None decides from the input size.

    Returns:
        Sorted examples, every score of one below every score of the next.
    """
    runs = [run for run in runs if len(run.keys)]
    if len(runs) <= 1:
        return runs
    threads = resolve_threads(num_threads, sum(len(run.keys) for run in runs))
    pivots = _pivots(runs, threads) if threads > 1 else np.empty(0, runs[0].keys.dtype)
    pieces = [_cut(run, pivots) for run in runs]
    range_pieces = [[run_pieces[index] for run_pieces in pieces] for index in range(len(pivots) + 1)]
    return parallel_map(_merged, range_pieces, threads, cost=lambda parts: sum(len(part.keys) for part in parts))


def _merged(runs: Sequence[Examples]) -> Examples:
    """Sorted runs (in one form) as one sorted run, joined on the calling thread."""
    runs = [run for run in runs if len(run.keys)] or list(runs[:1])
    return runs[0] if len(runs) == 1 else sort(join(runs))


def _group_start(keys: np.ndarray, labels_apart: bool) -> np.ndarray:
    """For keys of sorted examples, the smallest key of the same score (clears the label bit)."""
    return keys if labels_apart else keys & ~1


def _blocks(sorted_ranges: Sequence[Examples]) -> list[Examples]:
    """The ranges cut into blocks of about ``_BLOCK`` examples, each of whole groups of equal scores.

    Blocks keep every temporary array of the metrics in the CPU's cache.
    """
    blocks = []
    for part in sorted_ranges:
        size = len(part.keys)
        bounds = np.arange(_BLOCK, size, _BLOCK)
        # Each bound moves back to the first example of its score.
        bounds = np.searchsorted(part.keys, _group_start(part.keys[bounds], part.labels is not None), "left")
        cuts = [0, *np.unique(bounds[bounds > 0]).tolist(), size] if size else []
        blocks += [_rows(part, start, stop) for start, stop in zip(cuts[:-1], cuts[1:])]
    return blocks


def _map_blocks(fn: Callable[..., Any], blocks: Sequence[Any], threads: int) -> list[Any]:
    """``[fn(*block) for block in blocks]``, each thread taking a run of consecutive blocks."""
    groups = [blocks[piece] for piece in slices(len(blocks), min(threads, len(blocks)))]
    results = parallel_map(lambda group: [fn(*block) for block in group], groups, threads)
    return [result for group in results for result in group]


def slices(size: int, parts: int) -> list[slice]:
    """``parts`` contiguous slices of nearly equal length covering ``range(size)``."""
    bounds = [size * i // max(parts, 1) for i in range(parts + 1)]
    return [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]


def _position_sums(is_positive: np.ndarray) -> tuple[int, int]:
    """How many examples are positive, and the sum of their positions, exactly.

    Blocks of labels are multiplied with their positions by float32 BLAS: every partial
    sum of a block is an integer below 2**24, so the products are exact, and far
    cheaper than listing the positions.
    """
    rows = len(is_positive) // _POSITION_BLOCK
    count = position_sum = 0
    if rows:
        blocks = is_positive[: rows * _POSITION_BLOCK].reshape(rows, _POSITION_BLOCK).astype(np.float32)
        weights = np.stack([np.arange(_POSITION_BLOCK, dtype=np.float32), np.ones(_POSITION_BLOCK, np.float32)], 1)
        within, counts = (blocks @ weights).astype(np.int64).T
        count = int(counts.sum())
        position_sum = int(within.sum()) + int(np.dot(counts, np.arange(rows, dtype=np.int64))) * _POSITION_BLOCK
    tail = np.flatnonzero(is_positive[rows * _POSITION_BLOCK :]) + rows * _POSITION_BLOCK
    return count + len(tail), position_sum + int(tail.sum())


class _TieGroups(NamedTuple):
    """The groups of two or more equal scores in a sorted block."""

    starts: np.ndarray  # position of each group's first example
    sizes: np.ndarray
    positives: np.ndarray  # positives in each group
    positives_before: np.ndarray  # positives before each group


def _tie_groups(
    examples: Examples, is_positive: np.ndarray, positives_through: Optional[np.ndarray] = None
) -> Optional[_TieGroups]:
    """The groups of equal scores in sorted examples, or None if every score is distinct.

    ``positives_through``, ``np.cumsum(is_positive)``, is computed if not given.
    """
    keys = examples.keys
    if examples.labels is None:
        # Labeled keys of one score differ in bit 0 alone (read unsigned: keys of
        # opposite signs differ in the sign bit).
        tied = np.flatnonzero((keys[1:] ^ keys[:-1]).view(_UNSIGNED[keys.dtype]) < 2)
    else:
        tied = np.flatnonzero(keys[1:] == keys[:-1])
    if len(tied) == 0:
        return None
    # Runs of consecutive positions in `tied` are the groups (a group of k ties k - 1 times).
    first = np.concatenate(([True], np.diff(tied) != 1))
    # (np.compress: far faster than boolean indexing)
    starts = np.compress(first, tied)
    ends = np.compress(np.append(first[1:], True), tied) + 1  # each group's last example
    if positives_through is None:
        positives_through = np.cumsum(is_positive, dtype=np.int64)
    before = positives_through[starts] - is_positive[starts]
    return _TieGroups(starts, ends - starts + 1, positives_through[ends] - before, before)


def _concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(start, start + length) for ...])``, without the loop."""
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))


class _Counts(NamedTuple):
    """Positive and negative mass of a range: counts (int) or sums of weights (float)."""

    positives: Any
    negatives: Any


def _kernels_for(examples: Examples) -> Optional[ModuleType]:
    """The native kernels if they count these examples (unweighted, labels in the keys, fewer than 2**31), else None."""
    if examples.labels is None and examples.weights is None and len(examples.keys) < 1 << 31:
        return kernels
    return None


def _counts(examples: Examples) -> _Counts:
    native = _kernels_for(examples)
    if native is not None:
        positives = native.count_positives(examples.keys)
        return _Counts(positives, len(examples.keys) - positives)
    if examples.weights is None:
        positives = int(np.count_nonzero(labels_of(examples)))
        return _Counts(positives, len(examples.keys) - positives)
    positive_mass = float(np.sum(np.compress(labels_of(examples), examples.weights), dtype=np.float64))
    return _Counts(positive_mass, float(np.sum(examples.weights, dtype=np.float64)) - positive_mass)


class _Groups(NamedTuple):
    """Every group of equal scores of a sorted weighted range, in increasing order."""

    positives: np.ndarray  # positive mass of each group
    negatives: np.ndarray


def _all_groups(examples: Examples, weights: np.ndarray) -> _Groups:
    """The groups of ``examples``, whose ``weights`` are given."""
    keys = plain_keys(examples)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    weights = weights.astype(np.float64)
    positive_weights = np.where(labels_of(examples), weights, 0.0)
    positives = np.add.reduceat(positive_weights, starts)
    return _Groups(positives, np.add.reduceat(weights - positive_weights, starts))


def _auc_credit(examples: Examples) -> tuple[_Counts, Any]:
    """A sorted range's masses, and the credit of its own pairs.

    Unweighted: twice the credit, an exact int. Each positive beats the negatives
    before it (negatives come first among equal scores); tied pairs count one half.
    """
    native = _kernels_for(examples)
    if native is not None:
        positives, twice_credit = native.auc_credit(examples.keys)
        return _Counts(positives, len(examples.keys) - positives), twice_credit
    if examples.weights is None:
        is_positive = labels_of(examples)
        positives, position_sum = _position_sums(is_positive)
        ties = _tie_groups(examples, is_positive)
        tied_pairs = 0 if ties is None else int(np.dot(ties.positives, ties.sizes - ties.positives))
        twice_credit = 2 * position_sum - positives * (positives - 1) - tied_pairs
        return _Counts(positives, len(examples.keys) - positives), twice_credit
    groups = _all_groups(examples, examples.weights)
    negatives_below = np.cumsum(groups.negatives) - groups.negatives
    credit = float(np.dot(groups.positives, negatives_below + 0.5 * groups.negatives))
    return _Counts(float(np.sum(groups.positives)), float(np.sum(groups.negatives))), credit


def roc_auc(sorted_ranges: Sequence[Examples], num_threads: Optional[int] = None) -> float:
    """Exact area under the ROC curve of sorted ranges of increasing scores (see :func:`ranges`).

    The AUC is the probability that a random positive scores above a random
    negative, tied pairs counting one half (the trapezoidal ROC curve, as in
    ``sklearn.metrics.roc_auc_score``).

    Args:
        sorted_ranges: Sorted examples, every score of one below every score of the next.
        num_threads: Threads to use; None decides from the input size.

    Returns:
        The AUC, or NaN if a class is empty.
    """
    threads = resolve_threads(num_threads, sum(len(part.keys) for part in sorted_ranges))
    results = _map_blocks(_auc_credit, [(block,) for block in _blocks(sorted_ranges)], threads)
    weighted = bool(sorted_ranges) and sorted_ranges[0].weights is not None
    credits, negatives_below = [], 0
    for counts, credit in results:
        # Every positive of a block beats every negative of the blocks below it.
        credits.append(credit + (1 if weighted else 2) * counts.positives * negatives_below)
        negatives_below += counts.negatives
    positives = sum(counts.positives for counts, _ in results)
    if positives == 0 or negatives_below == 0:
        return math.nan
    if weighted:
        return math.fsum(credits) / (positives * negatives_below)
    # int / int rounds correctly.
    return sum(credits) / (2 * positives * negatives_below)


def _precision_sum(examples: Examples, counts: _Counts, above: _Counts) -> float:
    """Sum over the positives of a sorted range of the precision at their score.

    ``above`` is the mass of the ranges of higher scores. An example is predicted
    positive at a threshold when its score is at least the threshold, so all the
    positives of one score share the precision at that score's first position.
    """
    if examples.weights is not None:
        groups = _all_groups(examples, examples.weights)
        # Sums from the top, as sklearn's, keep the totals of the highest thresholds exact.
        true_positives = above.positives + np.cumsum(groups.positives[::-1])[::-1]
        predicted = true_positives + above.negatives + np.cumsum(groups.negatives[::-1])[::-1]
        kept = groups.positives > 0
        precision = np.compress(kept, true_positives) / np.compress(kept, predicted)
        return float(np.dot(np.compress(kept, groups.positives), precision))
    size = len(examples.keys)
    # Positives, and examples, at or above the range's lowest score.
    top_positives = above.positives + counts.positives
    top_examples = above.positives + above.negatives + size
    native = _kernels_for(examples)
    if native is not None:
        return native.precision_sum(examples.keys, top_positives, top_examples)
    is_positive = labels_of(examples)
    # First as if every score were distinct: the positive at position p, with k positives
    # before it, has precision (top_positives - k) / (top_examples - p).
    positives_through = None
    if _DENSE_SHARE * counts.positives < size:
        positions = np.flatnonzero(is_positive)
        untied_sum = np.sum((top_positives - np.arange(len(positions))) / (top_examples - positions))
    else:
        # Listing the positions of many positives (a pass of unpredictable branches) costs
        # more than a precision at every example, zeroed at the negatives. At a positive,
        # positives_through is k + 1.
        positives_through = np.cumsum(is_positive, dtype=np.int64)
        precision = np.subtract(top_positives + 1, positives_through, dtype=np.float64)
        precision *= is_positive
        precision /= np.arange(top_examples, top_examples - size, -1.0)
        untied_sum = np.sum(precision)
    ties = _tie_groups(examples, is_positive, positives_through)
    if ties is None:
        return float(untied_sum)
    return float(untied_sum) + _tie_correction(ties, top_positives, top_examples)


def _tie_correction(groups: _TieGroups, top_positives: int, top_examples: int) -> float:
    """What ties change in a precision sum taken as if every score were distinct.

    The positives of a tied score all get the precision at the score's first position,
    counting every positive of the score, instead of each its own. ``top_positives`` and
    ``top_examples`` count the examples at or above the range's lowest score.
    """
    with_positives = groups.positives > 0
    starts, sizes, positives, before = (np.compress(with_positives, column) for column in groups)
    # A group's positives are its last examples (negatives come first among equal scores).
    positions = _concatenated_ranges(starts + sizes - positives, positives)
    untied = (top_positives - _concatenated_ranges(before, positives)) / (top_examples - positions)
    tied = (top_positives - before) / (top_examples - starts)
    return float(np.sum(positives * tied) - np.sum(untied))


def average_precision(sorted_ranges: Sequence[Examples], num_threads: Optional[int] = None) -> float:
    """Exact average precision of sorted ranges of increasing scores (see :func:`ranges`).

    Matches ``sklearn.metrics.average_precision_score``: the sum over distinct
    score thresholds ``t`` of ``(R(t) - R(t_next_higher)) * P(t)``, where an
    example is predicted positive when its score is ``>= t``. Tied scores form
    a single threshold.

    Args:
        sorted_ranges: Sorted examples, every score of one below every score of the next.
        num_threads: Threads to use; None decides from the input size.

    Returns:
        The average precision, or NaN if a class is empty.
    """
    threads = resolve_threads(num_threads, sum(len(part.keys) for part in sorted_ranges))
    blocks = _blocks(sorted_ranges)
    counts = _map_blocks(_counts, [(block,) for block in blocks], threads)
    above, positives_above, negatives_above = [], 0, 0
    for range_counts in reversed(counts):
        above.append(_Counts(positives_above, negatives_above))
        positives_above += range_counts.positives
        negatives_above += range_counts.negatives
    above.reverse()
    if positives_above == 0 or negatives_above == 0:
        return math.nan
    sums = _map_blocks(_precision_sum, list(zip(blocks, counts, above)), threads)
    return math.fsum(sums) / positives_above


def _examples_of_classes(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray],
    negative_weights: Optional[np.ndarray],
) -> Examples:
    scores = np.concatenate([np.asarray(positives).reshape(-1), np.asarray(negatives).reshape(-1)])
    is_positive = np.arange(len(scores)) < np.asarray(positives).size
    weights = None
    if positive_weights is not None or negative_weights is not None:
        weights = np.concatenate(
            [
                np.ones(np.size(positives)) if positive_weights is None else np.asarray(positive_weights, np.float64),
                np.ones(np.size(negatives)) if negative_weights is None else np.asarray(negative_weights, np.float64),
            ]
        )
    return labeled(scores, is_positive, weights)


def binary_roc_auc(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    num_threads: Optional[int] = None,
) -> float:
    """Exact area under the ROC curve, from the scores of each class (see :func:`roc_auc`).

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
    examples = sort(_examples_of_classes(positives, negatives, positive_weights, negative_weights))
    return roc_auc(ranges([examples], num_threads), num_threads)


def binary_average_precision(
    positives: np.ndarray,
    negatives: np.ndarray,
    positive_weights: Optional[np.ndarray] = None,
    negative_weights: Optional[np.ndarray] = None,
    *,
    num_threads: Optional[int] = None,
) -> float:
    """Exact average precision, from the scores of each class (see :func:`average_precision`).

    Args:
        positives: Scores of the positive examples, 1-D, without NaN.
        negatives: Scores of the negative examples, 1-D, without NaN.
        positive_weights: Weights of the positives (> 0), or None for ones.
        negative_weights: Weights of the negatives (> 0), or None for ones.
        num_threads: Threads to use; None decides from the input size.

    Returns:
        The average precision, or NaN if a class is empty.
    """
    examples = sort(_examples_of_classes(positives, negatives, positive_weights, negative_weights))
    return average_precision(ranges([examples], num_threads), num_threads)
