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

Each cell also keeps, per label, the first moment of its examples' keys about ``lo``:
where in the cell they lie on average. The AUC credits the pairs in overlapping cells of
different workers as those means suggest (see :func:`_credit_from_moments`); the bound
does not rely on them.
"""

from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np

# Rounds of pairwise merges before the remaining excess is merged in runs at once.
_PAIR_ROUNDS = 3
# Equal parts of a cell that each label's modelled density is integrated over, and
# where their ends lie, as fractions of the cell.
_PARTS_PER_CELL = 8
_PART_ENDS = np.arange(_PARTS_PER_CELL + 1) / _PARTS_PER_CELL


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
        positive_moment: float64 sum over the cell's positives of mass * (key - lo).
        negative_moment: float64 sum over the cell's negatives of mass * (key - lo).
    """

    lo: np.ndarray
    hi: np.ndarray
    positives: np.ndarray
    negatives: np.ndarray
    credit: np.ndarray
    uncertain: np.ndarray
    positive_moment: np.ndarray
    negative_moment: np.ndarray


def empty_cells() -> Cells:
    """Cells of no example."""
    keys, mass = np.empty(0, np.int64), np.empty(0, np.float64)
    return Cells(keys, keys, mass, mass, mass, mass, mass, mass)


def _key_distance(upper: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """``upper - lower`` of int64 keys (``upper >= lower``) as float64, without overflow."""
    return (upper.view(np.uint64) - lower.view(np.uint64)).astype(np.float64)


def _group_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Indices where a new run of equal values begins in a sorted array."""
    if len(sorted_values) == 0:
        return np.empty(0, np.intp)
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
    zeros = np.zeros(len(lo))
    return Cells(lo, lo.copy(), positives, negatives, 0.5 * positives * negatives, zeros, zeros, zeros.copy())


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
    distance = _key_distance(points.lo, cells.lo[index])
    return Cells(
        cells.lo,
        cells.hi,
        cells.positives + new_positives,
        cells.negatives + new_negatives,
        cells.credit + inner + np.where(single, 0.5 * across, 0.0),
        cells.uncertain + np.bincount(index, weights=points.uncertain, minlength=size) + np.where(single, 0.0, across),
        cells.positive_moment
        + np.bincount(index, weights=points.positive_moment + points.positives * distance, minlength=size),
        cells.negative_moment
        + np.bincount(index, weights=points.negative_moment + points.negatives * distance, minlength=size),
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
        chosen = _cheapest(_link_costs(cells), excess)
        # Of consecutive chosen links, keep every other one, so that each merge joins two cells.
        run_index = np.arange(len(chosen))
        run_start = np.maximum.accumulate(np.where(chosen & ~np.concatenate(([False], chosen[:-1])), run_index, 0))
        cells = _merge_pairs(cells, np.flatnonzero(chosen & ((run_index - run_start) % 2 == 0)))
    excess = len(cells.lo) - budget
    if excess <= 0:
        return cells
    # The rest in one go: every chosen link merges, runs of them into one cell.
    begins = np.ones(len(cells.lo), bool)
    begins[1:] = ~_cheapest(_link_costs(cells), excess)
    return _merge_runs(cells, np.flatnonzero(begins))


def _cheapest(costs: np.ndarray, count: int) -> np.ndarray:
    """A mask of the ``count`` smallest costs (``1 <= count <= len(costs)``), equal costs by lowest index.

    ``np.argpartition`` alone leaves the choice among costs equal to the ``count``-th
    one to its selection algorithm, which differs between NumPy releases and CPUs (NumPy
    2 selects with SIMD kernels): the same examples then gave different cells. The
    ``count``-th smallest value does not depend on it, so the ties are chosen here.
    """
    threshold = np.partition(costs, count - 1)[count - 1]
    chosen = costs < threshold
    ties = np.flatnonzero(costs == threshold)
    chosen[ties[: count - np.count_nonzero(chosen)]] = True
    return chosen


def _merge_pairs(cells: Cells, links: np.ndarray) -> Cells:
    """Merges each cell ``i`` in ``links`` with cell ``i + 1`` (no two links adjacent)."""
    upper = links + 1
    hi, positives, negatives = cells.hi.copy(), cells.positives.copy(), cells.negatives.copy()
    credit, uncertain = cells.credit.copy(), cells.uncertain.copy()
    positive_moment, negative_moment = cells.positive_moment.copy(), cells.negative_moment.copy()
    hi[links] = cells.hi[upper]
    positives[links] += cells.positives[upper]
    negatives[links] += cells.negatives[upper]
    # The upper cell's positives beat the lower cell's negatives.
    credit[links] += cells.credit[upper] + cells.positives[upper] * cells.negatives[links]
    uncertain[links] += cells.uncertain[upper]
    # The upper cell's moments, taken about the lower cell's lo.
    distance = _key_distance(cells.lo[upper], cells.lo[links])
    positive_moment[links] += cells.positive_moment[upper] + cells.positives[upper] * distance
    negative_moment[links] += cells.negative_moment[upper] + cells.negatives[upper] * distance
    kept = np.ones(len(hi), bool)
    kept[upper] = False
    merged = Cells(cells.lo, hi, positives, negatives, credit, uncertain, positive_moment, negative_moment)
    return Cells(*(column[kept] for column in merged))


def _link_costs(cells: Cells) -> np.ndarray:
    """The cost of merging each cell with the next: pairs of opposite labels across, then span.

    The span of the merged cell adds less than half the smallest nonzero cost: a merge of
    cells of one label always comes before one that mixes labels, however wide it makes
    the cell, and with unit weights the span only breaks ties.
    """
    cost = cells.positives[:-1] * cells.negatives[1:] + cells.positives[1:] * cells.negatives[:-1]
    span = _key_distance(cells.hi[1:], cells.lo[:-1])
    nonzero = cost[cost > 0]
    smallest = float(nonzero.min()) if len(nonzero) else 1.0
    return cost + (0.5 * smallest / max(float(span.max()), 1.0)) * span


def _merge_runs(cells: Cells, starts: np.ndarray) -> Cells:
    """Each run of cells from one start to the next becomes one cell."""
    ends = np.append(starts[1:], len(cells.lo)) - 1
    # Each cell's moments, taken about the lo of its run.
    distance = _key_distance(cells.lo, np.repeat(cells.lo[starts], ends - starts + 1))
    return Cells(
        cells.lo[starts],
        cells.hi[ends],
        np.add.reduceat(cells.positives, starts),
        np.add.reduceat(cells.negatives, starts),
        np.add.reduceat(cells.credit, starts) + _credit_within_groups(cells.positives, cells.negatives, starts),
        np.add.reduceat(cells.uncertain, starts),
        np.add.reduceat(cells.positive_moment + cells.positives * distance, starts),
        np.add.reduceat(cells.negative_moment + cells.negatives * distance, starts),
    )


def cells_auc(states: Sequence[Cells]) -> tuple[float, float]:
    """ROC AUC from the cells of several workers, and a bound on its error.

    Pairs in cells that do not overlap are ordered by the cells; pairs inside one cell
    have their known credit, and the uncertain pairs inside cells count one half.
    Single-key cells of equal keys tie. Pairs in overlapping cells of different workers
    are credited as each cell's moments suggest (see :func:`_credit_from_moments`).

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
    credit = _credit_from_moments(cells)
    return credit / pairs, (0.5 * uncertain + abs(credit - midpoint)) / pairs


def _credit_from_moments(cells: Cells) -> float:
    """The credit of all pairs, each cell's examples of a label spread as their moment says.

    ``cells`` are those of all workers together. Inside a wide cell, the examples of each
    label are given a density over the cell's keys whose mean is theirs
    (:func:`_cumulative_shares`), integrated over ``_PARTS_PER_CELL`` equal parts of the
    cell. Pairs inside one cell keep their known credit (and half of their uncertain
    pairs); pairs across cells of one worker, which do not overlap, come out exactly; a
    positive in one worker's cell is credited with the modelled share of each
    overlapping cell of another worker that lies below it, and half of a single-key
    cell of its own key.

    Spreading each cell evenly instead is biased wherever the density of scores changes
    across a cell, as in the tails, where a cell's examples crowd its inner end.
    """
    # Keys as floats, measured from the lowest: the unsigned difference cannot overflow.
    lo = _key_distance(cells.lo, np.full(len(cells.lo), cells.lo.min()))
    width = _key_distance(cells.hi, cells.lo)
    # A cell narrower than float resolution here is a point, as is a single-key cell.
    wide = lo + width > lo
    part_ends = lo[wide, None] + width[wide, None] * _PART_ENDS  # (wide cells, parts + 1)
    positive_shares = np.diff(_cumulative_shares(cells.positive_moment[wide], cells.positives[wide], width[wide]))
    negative_shares = np.diff(_cumulative_shares(cells.negative_moment[wide], cells.negatives[wide], width[wide]))
    ends = np.unique(np.concatenate((part_ends.ravel(), lo[~wide])))
    gaps = np.diff(ends)
    starts, stops = np.searchsorted(ends, part_ends[:, :-1]), np.searchsorted(ends, part_ends[:, 1:])
    # A part that rounds to no width at all is a point at its start.
    flat = stops == starts
    point_index = np.concatenate((np.searchsorted(ends, lo[~wide]), starts[flat]))

    def spread(mass: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Density of the mass between consecutive ends, and the point mass at each end."""
        part_mass = mass[wide, None] * shares
        part_density = np.where(flat, 0.0, part_mass / np.where(flat, 1.0, part_ends[:, 1:] - part_ends[:, :-1]))
        density_change = np.bincount(starts.ravel(), part_density.ravel(), len(ends)) - np.bincount(
            stops.ravel(), part_density.ravel(), len(ends)
        )
        point_mass = np.concatenate((mass[~wide], part_mass[flat]))
        return np.cumsum(density_change)[:-1], np.bincount(point_index, point_mass, len(ends))

    negative_density, negative_steps = spread(cells.negatives, negative_shares)
    positive_density, positive_steps = spread(cells.positives, positive_shares)
    # The negatives below each end, and the positives' credit: on the points, and
    # between ends, where the negatives below grow linearly.
    below_end = np.concatenate(([0.0], np.cumsum(negative_steps[:-1] + negative_density * gaps)))
    above_end = below_end + negative_steps
    credit = float(np.dot(positive_steps, below_end + 0.5 * negative_steps))
    credit += float(np.dot(positive_density, above_end[:-1] * gaps + 0.5 * negative_density * gaps * gaps))
    # That credited each cell's own pairs as the model orders them; their known credit,
    # and half of their uncertain pairs, replace that.
    own_share = np.full(len(cells.lo), 0.5)
    own_share[wide] = np.sum(positive_shares * (np.cumsum(negative_shares, axis=1) - 0.5 * negative_shares), axis=1)
    own = cells.positives * cells.negatives * own_share
    return credit + float(np.sum(cells.credit + 0.5 * cells.uncertain - own))


def _cumulative_shares(moment: np.ndarray, mass: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Share of each cell's mass of one label below each of the ``_PART_ENDS``.

    The density over the cell (``u`` in [0, 1]) has the mean ``m`` that the moment gives:
    linear, ``1 + k (2u - 1)`` with ``k = 6 (m - 1/2)``, for ``m`` in [1/3, 2/3]; closer to
    an end, a triangle that rises from ``3m - 2`` to 1, or falls from 0 to ``3m``. A
    linear density cannot lean further; the triangles keep the mass where the mean puts
    it, which is where a tail cell's examples are: at its inner end.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(mass > 0, moment / (mass * width), 0.5)
    mean = np.clip(mean, 0.0, 1.0)[:, None]
    u = _PART_ENDS
    linear = u + np.clip(6.0 * (mean - 0.5), -1.0, 1.0) * (u * u - u)
    rise_start = np.minimum(3.0 * mean - 2.0, 1.0 - 1e-12)
    rising = np.square(np.clip(u - rise_start, 0.0, None) / (1.0 - rise_start))
    fall_end = np.maximum(3.0 * mean, 1e-12)
    falling = 1.0 - np.square(np.clip(fall_end - u, 0.0, None) / fall_end)
    return np.where(mean > 2.0 / 3.0, rising, np.where(mean < 1.0 / 3.0, falling, linear))


def _ties_across_cells(cells: Cells) -> float:
    """Pairs tied across distinct single-key cells of equal keys (from different workers)."""
    single = cells.lo == cells.hi
    keys, index = np.unique(cells.lo[single], return_inverse=True)
    positives = np.bincount(index, weights=cells.positives[single], minlength=len(keys))
    negatives = np.bincount(index, weights=cells.negatives[single], minlength=len(keys))
    return float(np.dot(positives, negatives) - np.dot(cells.positives[single], cells.negatives[single]))
