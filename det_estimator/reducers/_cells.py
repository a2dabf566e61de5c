"""Adaptive cells: the math of :class:`BinnedRocAuc`, as pure functions of NumPy arrays.

A cell is an interval ``[lo, hi]`` of score order keys (see ``order_keys``) with the
positive and negative mass of the examples in it, the credit of the pairs inside it whose
order is known, and the number of pairs inside it whose order is not. Adjacent cells of
one worker are disjoint, so merging two of them loses nothing: every pair across them is
ordered, and its credit is added to the merged cell. Order is lost only when an example
falls inside a cell that already spans several keys (the new example's place among the
old ones is unknown), or when cells of different workers overlap. Those pairs, and only
those, make up the error bound, which is therefore rigorous: the exact AUC lies
within half of them of the AUC that counts each one half.
"""

from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np

# Rounds of pairwise merges before the remaining excess is merged in runs at once.
_PAIR_ROUNDS = 3


class Cells(NamedTuple):
    """Disjoint cells in increasing order of keys, one entry per cell.

    Attributes:
        lo: int64 key of the lowest example in the cell.
        hi: int64 key of the highest example in the cell (``lo == hi``: a single score).
        positives: float64 positive mass (count, or sum of weights).
        negatives: float64 negative mass.
        credit: float64 credit of the (positive, negative) pairs inside the cell whose
            order is known: 1 per positive above its negative, 1/2 per tie.
        uncertain: float64 mass of the pairs inside the cell whose order is unknown.
    """

    lo: np.ndarray
    hi: np.ndarray
    positives: np.ndarray
    negatives: np.ndarray
    credit: np.ndarray
    uncertain: np.ndarray


def empty_cells() -> Cells:
    """Cells of no example."""
    keys, mass = np.empty(0, np.int64), np.empty(0, np.float64)
    return Cells(keys, keys, mass, mass, mass, mass)


def _group_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Indices where a new run of equal values begins in a sorted array."""
    return np.flatnonzero(np.concatenate(([True], sorted_values[1:] != sorted_values[:-1])))


def _credit_within_groups(positives: np.ndarray, negatives: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group of consecutive sorted entries: known credit of the pairs across its entries.

    Entry ``j`` of a group beats the negatives of the entries before it in the group.
    ``groups`` are the indices where groups begin.
    """
    negatives_before = np.cumsum(negatives) - negatives
    negatives_before -= np.repeat(negatives_before[groups], np.diff(np.append(groups, len(negatives))))
    return np.add.reduceat(positives * negatives_before, groups) if len(groups) else np.empty(0)


def cells_from_points(keys: np.ndarray, is_positive: np.ndarray, weights: Optional[np.ndarray] = None) -> Cells:
    """One single-key cell per distinct key, with exact credit for the ties inside it.

    Args:
        keys: int64 order keys of the examples, in any order.
        is_positive: bool labels.
        weights: Per-example weights, or None for ones.

    Returns:
        The cells, in increasing order of key.
    """
    if len(keys) == 0:
        return empty_cells()
    order = np.argsort(keys)
    keys = keys[order]
    mass = np.ones(len(keys)) if weights is None else weights[order].astype(np.float64)
    positive = is_positive[order]
    starts = _group_starts(keys)
    positives = np.add.reduceat(np.where(positive, mass, 0.0), starts)
    negatives = np.add.reduceat(np.where(positive, 0.0, mass), starts)
    lo = keys[starts]
    return Cells(lo, lo.copy(), positives, negatives, 0.5 * positives * negatives, np.zeros(len(lo)))


def add_points(cells: Cells, points: Cells) -> Cells:
    """Adds single-key cells (new examples) to disjoint cells.

    A point inside a cell that spans several keys joins that cell: its pairs with the
    cell's examples become uncertain. A point on a single-key cell of the same key ties
    with its examples exactly. Other points become cells of their own.

    Args:
        cells: Disjoint cells in increasing order.
        points: Single-key cells in increasing order of key.

    Returns:
        Disjoint cells in increasing order.
    """
    if len(cells.lo) == 0 or len(points.lo) == 0:
        return points if len(cells.lo) == 0 else cells
    index = np.searchsorted(cells.lo, points.lo, "right") - 1
    inside = (index >= 0) & (points.lo <= cells.hi[np.maximum(index, 0)])
    joined = _absorb(cells, Cells(*(column[inside] for column in points)), index[inside])
    alone = Cells(*(column[~inside] for column in points))
    merged = Cells(*(np.concatenate(pair) for pair in zip(joined, alone)))
    order = np.argsort(merged.lo, kind="stable")
    return Cells(*(column[order] for column in merged))


def _absorb(cells: Cells, points: Cells, index: np.ndarray) -> Cells:
    """``cells`` after each point joined the cell ``index`` says (points sorted by key)."""
    size = len(cells.lo)
    groups = _group_starts(index)
    # The points joining one cell are ordered among themselves.
    inner = np.zeros(size)
    inner[index[groups]] = _credit_within_groups(points.positives, points.negatives, groups) + np.add.reduceat(
        points.credit, groups
    )
    new_positives = np.bincount(index, weights=points.positives, minlength=size)
    new_negatives = np.bincount(index, weights=points.negatives, minlength=size)
    across = new_positives * cells.negatives + new_negatives * cells.positives
    single = cells.lo == cells.hi
    return Cells(
        cells.lo,
        cells.hi,
        cells.positives + new_positives,
        cells.negatives + new_negatives,
        cells.credit + inner + np.where(single, 0.5 * across, 0.0),
        cells.uncertain + np.bincount(index, weights=points.uncertain, minlength=size) + np.where(single, 0.0, across),
    )


def merge_cells(cells: Cells, budget: int) -> Cells:
    """Merges adjacent cells, two at a time, until at most ``budget`` cells are left.

    Merging adjacent cells keeps every credit exact; what it costs is the order of the
    examples that may still fall inside the wider cell (later batches, other workers).
    Expecting them where the cell's own examples are, the cheapest links are those with
    the fewest pairs of opposite labels across them (cells of one label merge for
    free); among equal costs, the narrower merged cell is preferred. Merging in rounds
    of disjoint pairs, rather than whole runs of cheap links at once, keeps cells from
    growing wide where many cheap links are next to each other.

    Args:
        cells: Disjoint cells in increasing order.
        budget: The most cells to keep (>= 1).

    Returns:
        Disjoint cells in increasing order, at most ``budget`` of them.
    """
    for _ in range(_PAIR_ROUNDS):
        excess = len(cells.lo) - budget
        if excess <= 0:
            return cells
        costs = _link_costs(cells)
        chosen = np.zeros(len(costs), bool)
        chosen[np.argpartition(costs, excess - 1)[:excess]] = True
        # Of consecutive chosen links, keep every other one, so that each merge joins two cells.
        run_index = np.arange(len(chosen))
        run_start = np.maximum.accumulate(np.where(chosen & ~np.concatenate(([False], chosen[:-1])), run_index, 0))
        cells = _merge_pairs(cells, np.flatnonzero(chosen & ((run_index - run_start) % 2 == 0)))
    excess = len(cells.lo) - budget
    if excess <= 0:
        return cells
    # The rest in one go: every chosen link merges, runs of them into one cell.
    begins = np.ones(len(cells.lo), bool)
    begins[np.argpartition(_link_costs(cells), excess - 1)[:excess] + 1] = False
    return _merge_runs(cells, np.flatnonzero(begins))


def _merge_pairs(cells: Cells, links: np.ndarray) -> Cells:
    """Merges each cell ``i`` in ``links`` with cell ``i + 1`` (no two links adjacent)."""
    upper = links + 1
    hi, positives, negatives = cells.hi.copy(), cells.positives.copy(), cells.negatives.copy()
    credit, uncertain = cells.credit.copy(), cells.uncertain.copy()
    hi[links] = cells.hi[upper]
    positives[links] += cells.positives[upper]
    negatives[links] += cells.negatives[upper]
    # The upper cell's positives beat the lower cell's negatives.
    credit[links] += cells.credit[upper] + cells.positives[upper] * cells.negatives[links]
    uncertain[links] += cells.uncertain[upper]
    kept = np.ones(len(hi), bool)
    kept[upper] = False
    return Cells(cells.lo[kept], hi[kept], positives[kept], negatives[kept], credit[kept], uncertain[kept])


def _link_costs(cells: Cells) -> np.ndarray:
    """The cost of merging each cell with the next: pairs of opposite labels across, then span.

    The span (in [0, 1/2) of the mass unit, so it only breaks ties between costs) is
    that of the merged cell.
    """
    cost = cells.positives[:-1] * cells.negatives[1:] + cells.positives[1:] * cells.negatives[:-1]
    # In floats: the difference of two int64 keys may overflow.
    span = cells.hi[1:].astype(np.float64) - cells.lo[:-1].astype(np.float64)
    unit = (np.sum(cells.positives) + np.sum(cells.negatives)) / len(cells.lo)
    return cost + (0.5 * unit * unit / max(float(span.max()), 1.0)) * span


def _merge_runs(cells: Cells, starts: np.ndarray) -> Cells:
    """Each run of cells from one start to the next becomes one cell."""
    ends = np.append(starts[1:], len(cells.lo)) - 1
    return Cells(
        cells.lo[starts],
        cells.hi[ends],
        np.add.reduceat(cells.positives, starts),
        np.add.reduceat(cells.negatives, starts),
        np.add.reduceat(cells.credit, starts) + _credit_within_groups(cells.positives, cells.negatives, starts),
        np.add.reduceat(cells.uncertain, starts),
    )


def cells_auc(states: Sequence[Cells]) -> tuple[float, float]:
    """ROC AUC from the cells of several workers, and a bound on its error.

    Pairs in cells that do not overlap are ordered by the cells; pairs inside one cell
    have their known credit, and the uncertain pairs inside cells count one half.
    Single-key cells of equal keys tie. Pairs in overlapping cells of different workers
    are credited as if each cell's examples were spread evenly over its keys (see
    :func:`_evenly_spread_credit`). Counting them one half instead was biased: on 20
    draws of 200k scores (``benchmarks/reducers.py``) the largest error on 2 and 4
    workers was 1.3e-6 to 7.8e-6, and is 0.8e-6 to 6.3e-6 this way.

    Args:
        states: The cells of each worker (each disjoint and sorted).

    Returns:
        ``(auc, bound)``: the AUC and a rigorous bound on its distance to the exact
        AUC; both NaN if a class is empty.
    """
    cells = Cells(*(np.concatenate(column) for column in zip(*states)))
    total_positive, total_negative = float(np.sum(cells.positives)), float(np.sum(cells.negatives))
    pairs = total_positive * total_negative
    if pairs == 0:
        return float("nan"), float("nan")
    by_hi = np.argsort(cells.hi, kind="stable")
    negatives_by_hi = np.concatenate(([0.0], np.cumsum(cells.negatives[by_hi])))
    below = float(np.dot(cells.positives, negatives_by_hi[np.searchsorted(cells.hi[by_hi], cells.lo, "left")]))
    by_lo = np.argsort(cells.lo, kind="stable")
    negatives_from_lo = np.concatenate((np.cumsum(cells.negatives[by_lo][::-1])[::-1], [0.0]))
    above = float(np.dot(cells.positives, negatives_from_lo[np.searchsorted(cells.lo[by_lo], cells.hi, "right")]))
    ties = _ties_across_cells(cells)
    inside = float(np.dot(cells.positives, cells.negatives))
    # One worker's cells never overlap: then there is nothing left but rounding.
    overlapping = 0.0
    if len(states) > 1:
        overlapping = pairs - below - above - ties - inside
        # Each sum above may be off by its length times the rounding unit, relative to the
        # pairs (Higham's bound for float dot products): a remainder within that is rounding.
        if overlapping <= 4 * len(cells.lo) * np.finfo(np.float64).eps * pairs:
            overlapping = 0.0
    uncertain = float(np.sum(cells.uncertain)) + overlapping
    # The exact credit lies within half the uncertain pairs of this midpoint.
    midpoint = below + 0.5 * ties + float(np.sum(cells.credit)) + 0.5 * uncertain
    if overlapping == 0.0:
        return midpoint / pairs, 0.5 * uncertain / pairs
    credit = _evenly_spread_credit(cells)
    return credit / pairs, (0.5 * uncertain + abs(credit - midpoint)) / pairs


def _evenly_spread_credit(cells: Cells) -> float:
    """The credit of all pairs, each cell's examples taken as spread evenly over its keys.

    ``cells`` are those of all workers together. Pairs inside one cell keep their known
    credit (and half of their uncertain pairs); pairs across cells of one worker, which
    do not overlap, come out exactly; a positive in one worker's cell is credited with
    the share of each overlapping cell of another worker that lies below it, or half of
    a single-key cell of its own key.

    The negatives below a key form a piecewise linear function G (with a step at each
    single-key cell); a cell's positives are credited with the mean of G over the cell,
    taken from the integral of G, which is piecewise quadratic between the cells' ends.
    """
    # Keys as floats, measured from the lowest: the unsigned difference cannot overflow.
    start = cells.lo.min()
    lo = (cells.lo.view(np.uint64) - start.view(np.uint64)).astype(np.float64)
    hi = (cells.hi.view(np.uint64) - start.view(np.uint64)).astype(np.float64)
    wide = hi > lo
    width = np.where(wide, hi - lo, 1.0)
    ends = np.unique(np.concatenate((lo, hi)))
    lo_index, hi_index = np.searchsorted(ends, lo), np.searchsorted(ends, hi)
    # Density of negatives between consecutive ends, from the wide cells that span them.
    density_change = np.zeros(len(ends))
    np.add.at(density_change, lo_index[wide], cells.negatives[wide] / width[wide])
    np.add.at(density_change, hi_index[wide], -cells.negatives[wide] / width[wide])
    density = np.cumsum(density_change)[:-1]
    steps = np.bincount(lo_index[~wide], weights=cells.negatives[~wide], minlength=len(ends))
    gaps = np.diff(ends)
    below_end = np.concatenate(([0.0], np.cumsum(steps[:-1] + density * gaps)))  # G just below each end
    above_end = below_end + steps
    integral = np.concatenate(([0.0], np.cumsum(above_end[:-1] * gaps + 0.5 * density * gaps * gaps)))
    mean_below = np.where(
        wide,
        (integral[hi_index] - integral[lo_index]) / width,
        below_end[lo_index] + 0.5 * steps[lo_index],
    )
    # mean_below counts a cell's own negatives as spread like its positives (one half of
    # its pairs); its known credit and half of its uncertain pairs replace them.
    own = 0.5 * cells.positives * cells.negatives
    return float(np.sum(cells.positives * mean_below - own + cells.credit + 0.5 * cells.uncertain))


def _ties_across_cells(cells: Cells) -> float:
    """Pairs tied across distinct single-key cells of equal keys (from different workers)."""
    single = cells.lo == cells.hi
    keys, index = np.unique(cells.lo[single], return_inverse=True)
    positives = np.bincount(index, weights=cells.positives[single], minlength=len(keys))
    negatives = np.bincount(index, weights=cells.negatives[single], minlength=len(keys))
    return float(np.dot(positives, negatives) - np.dot(cells.positives[single], cells.negatives[single]))
