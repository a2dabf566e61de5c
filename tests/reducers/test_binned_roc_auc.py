"""Accuracy, rigorous error bound and mechanics of BinnedRocAuc (adaptive cells and fixed bins)."""

import pickle

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from det_estimator.reducers import BinnedRocAuc
from det_estimator.reducers import _binned_roc_auc as binned_module
from det_estimator.reducers import _cells as cells_math
from det_estimator.reducers import _ranking as ranking
from det_estimator.reducers._binned_roc_auc import ScoreCells


def reduce(reducer, batches):
    states = [pickle.loads(pickle.dumps(reducer.accumulate(batch))) for batch in batches]
    return reducer.cross_slot_reduce(states[-1:])


def workers_states(make_reducer, labels, scores, weights=None, workers=3, batch_size=97):
    """Round-robin shares of the data, fed batch by batch to one reducer per worker."""
    states = []
    for worker in range(workers):
        reducer, state = make_reducer(), None
        rows = np.arange(worker, len(labels), workers)
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            metric = {"labels": labels[batch], "predictions": scores[batch]}
            if weights is not None:
                metric["weights"] = weights[batch]
            state = reducer.accumulate(metric)
        states.append(pickle.loads(pickle.dumps(state)))
    return states


@pytest.fixture(scope="module")
def rare_positives():
    """1e6 float32 probabilities peaked near 0, 2% positives."""
    rng = np.random.default_rng(2024)
    n = 1_000_000
    labels = rng.random(n) < 0.02
    logits = np.where(labels, rng.normal(-3.0, 1.0, n), rng.normal(-4.5, 1.0, n))
    probabilities = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return labels, probabilities, roc_auc_score(labels, probabilities)


def test_default_cells_resolve_probabilities_peaked_near_zero(rare_positives):
    labels, probabilities, exact = rare_positives
    reducer = BinnedRocAuc()
    batches = [
        {"labels": labels[i : i + 250_000], "predictions": probabilities[i : i + 250_000]}
        for i in range(0, len(labels), 250_000)
    ]
    binned = reduce(reducer, batches)
    assert abs(binned - exact) <= reducer.last_error_bound
    # 4096 uniform logit bins, the former default, gave an error of 1e-6 and a bound of 6e-4 here.
    assert abs(binned - exact) < 1e-6
    assert reducer.last_error_bound < 1e-4


@pytest.fixture(scope="module")
def balanced():
    """200k float32 probabilities, 50% positives."""
    rng = np.random.default_rng(2025)
    labels = rng.random(200_000) < 0.5
    probabilities = (1.0 / (1.0 + np.exp(-(rng.normal(size=200_000) + labels)))).astype(np.float32)
    return labels, probabilities, roc_auc_score(labels, probabilities)


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("case", ["rare_positives", "balanced"])
def test_default_cells_of_several_workers_stay_accurate(request, case, workers):
    labels, probabilities, exact = request.getfixturevalue(case)
    states = workers_states(BinnedRocAuc, labels, probabilities, workers=workers, batch_size=8192)
    reducer = BinnedRocAuc()
    binned = reducer.cross_slot_reduce(states)
    assert abs(binned - exact) <= reducer.last_error_bound
    # Spreading overlapping cells evenly gave 2.7e-6 (rare positives) and 1.6e-6 (balanced)
    # on 4 workers here.
    assert abs(binned - exact) < 5e-7


def test_uniform_probability_thresholds_do_not(rare_positives):
    labels, probabilities, exact = rare_positives
    # 200 uniform thresholds on [0, 1], as Keras' AUC metric uses by default.
    reducer = BinnedRocAuc(bins=np.linspace(0.0, 1.0, 201))
    binned = reduce(reducer, [{"labels": labels, "predictions": probabilities}])
    assert abs(binned - exact) > 1e-3
    assert abs(binned - exact) <= reducer.last_error_bound


def test_fewer_distinct_scores_than_cells_give_the_exact_auc_and_a_zero_bound():
    rng = np.random.default_rng(0)
    labels = rng.random(5000) < 0.3
    scores = np.round(rng.random(5000) + 0.3 * labels, 2)  # many ties, within and across workers
    weights = rng.uniform(0, 2, 5000)
    reducer = BinnedRocAuc(bins=512, scores="logits")
    for w in (None, weights):
        states = workers_states(lambda: BinnedRocAuc(bins=512, scores="logits"), labels, scores, w)
        expected = roc_auc_score(labels, scores, sample_weight=w)
        assert reducer.cross_slot_reduce(states) == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert reducer.last_error_bound == 0.0


@pytest.mark.parametrize("workers", [1, 2, 5])
@pytest.mark.parametrize("bins", [3, 16, 200])
@pytest.mark.parametrize("scenario", ["continuous", "ties", "weighted"])
def test_the_bound_holds_when_cells_merge(monkeypatch, scenario, bins, workers):
    # Small chunks: examples are merged into cells that already span several scores.
    monkeypatch.setattr(binned_module, "_CHUNK_EXAMPLES", 50)
    rng = np.random.default_rng(bins * 10 + workers)
    n = 4000
    labels = rng.random(n) < 0.2
    scores = rng.normal(size=n) + labels
    if scenario == "ties":
        scores = np.round(scores, 1)
    weights = rng.uniform(0, 3, n) * (rng.random(n) > 0.1) if scenario == "weighted" else None
    reducer = BinnedRocAuc(bins=bins, scores="logits")
    states = workers_states(lambda: BinnedRocAuc(bins=bins, scores="logits"), labels, scores, weights, workers)
    assert all(len(state.cells.lo) <= bins for state in states)
    binned = reducer.cross_slot_reduce(states)
    exact = roc_auc_score(labels, scores, sample_weight=weights)
    assert abs(binned - exact) <= reducer.last_error_bound + 1e-12
    assert reducer.last_error_bound < 0.5


def test_merging_the_cells_of_one_batch_keeps_the_auc_exact():
    rng = np.random.default_rng(1)
    labels = rng.random(3000) < 0.4
    scores = np.round(rng.normal(size=3000) + labels, 2)
    weights = rng.uniform(0.5, 2, 3000)
    keys = ranking.order_keys(scores)
    cells = cells_math.cells_from_points(keys, labels, weights)
    for budget in (1, 2, 7, 100):
        merged = cells_math.merge_cells(cells, budget)
        assert len(merged.lo) <= budget
        auc, bound = cells_math.cells_auc([merged])
        assert auc == pytest.approx(roc_auc_score(labels, scores, sample_weight=weights), rel=1e-12)
        assert bound == 0.0


def test_examples_that_all_fall_outside_the_cells_so_far_are_added(monkeypatch):
    # Validation data in increasing order of score: each chunk lies above every cell so far.
    monkeypatch.setattr(binned_module, "_CHUNK_EXAMPLES", 100)
    rng = np.random.default_rng(5)
    labels = rng.random(1000) < 0.3
    scores = np.sort(rng.random(1000))
    reducer = BinnedRocAuc(bins=8)
    for start in range(0, 1000, 100):
        state = reducer.accumulate({"labels": labels[start : start + 100], "predictions": scores[start : start + 100]})
    # The cells of different chunks do not overlap: no order is lost.
    assert reducer.cross_slot_reduce([state]) == pytest.approx(roc_auc_score(labels, scores), rel=1e-12)
    assert reducer.last_error_bound == 0.0


def test_examples_inside_a_wide_cell_become_uncertain_and_ties_on_a_single_score_do_not():
    keys = np.array([10, 20, 30])
    wide = cells_math.merge_cells(cells_math.cells_from_points(keys, np.array([False, True, False])), 1)
    assert (wide.lo[0], wide.hi[0], wide.credit[0], wide.uncertain[0]) == (10, 30, 1.0, 0.0)
    joined = cells_math.add_points(wide, cells_math.cells_from_points(np.array([25, 40]), np.array([True, True])))
    # 25 falls inside [10, 30]: unknown order against its 2 negatives; 40 is a cell of its own.
    assert joined.lo.tolist() == [10, 40] and joined.uncertain.tolist() == [2.0, 0.0]
    single = cells_math.cells_from_points(np.array([5]), np.array([False]))
    tied = cells_math.add_points(single, cells_math.cells_from_points(np.array([5, 5]), np.array([True, False])))
    assert tied.credit.tolist() == [1.0] and tied.uncertain.tolist() == [0.0]  # 2 tied pairs, half credit each


def test_overlapping_cells_of_different_workers_are_uncertain():
    below_and_above = cells_math.merge_cells(cells_math.cells_from_points(np.array([0, 10]), np.array([True, True])), 1)
    middle = cells_math.cells_from_points(np.array([5]), np.array([False]))
    auc, bound = cells_math.cells_auc([below_and_above, middle])
    assert (auc, bound) == (0.5, 0.5)  # either positive may be the one above the negative


@pytest.mark.parametrize(
    "negative_keys, positive_key, tolerance",
    [
        # Evenly spaced: the positive is above 90 of the 100, as even spreading also says.
        (2 * np.arange(100), 179, 0.005),
        # 90 crowded at the cell's low end, 10 spread up to 1900: the positive at 500 is above
        # 90 of them. Spread evenly over [0, 1900], the cell would put it above 26.
        (np.concatenate((np.arange(90), 1000 + 100 * np.arange(10))), 500, 0.1),
    ],
)
def test_overlapping_cells_are_credited_where_their_moments_put_their_examples(negative_keys, positive_key, tolerance):
    # Worker A: the negatives, merged into one cell. Worker B: one positive.
    negatives = cells_math.merge_cells(cells_math.cells_from_points(negative_keys, np.zeros(100, bool)), 1)
    positive = cells_math.cells_from_points(np.array([positive_key]), np.array([True]))
    auc, bound = cells_math.cells_auc([negatives, positive])
    exact = np.mean(negative_keys < positive_key)
    assert abs(auc - exact) < tolerance  # counting each uncertain pair one half would give 0.5
    assert abs(auc - exact) <= bound
    # The bound still covers every order the state allows, however the cell's examples lie.
    assert auc - bound <= 0.0 + 1e-12 and auc + bound >= 1.0 - 1e-12


@pytest.mark.parametrize("weighted", [False, True])
def test_each_cell_keeps_the_first_moment_of_its_keys_through_absorbs_and_merges(monkeypatch, weighted):
    # Small chunks: later examples fall inside cells that already span several keys.
    monkeypatch.setattr(binned_module, "_CHUNK_EXAMPLES", 50)
    rng = np.random.default_rng(7)
    labels = rng.random(5000) < 0.3
    scores = rng.normal(size=5000) + labels
    weights = rng.uniform(0.5, 2.0, 5000) if weighted else np.ones(5000)
    reducer = BinnedRocAuc(bins=16, scores="logits")
    for start in range(0, 5000, 100):
        batch = slice(start, start + 100)
        metric = {"labels": labels[batch], "predictions": scores[batch]}
        if weighted:
            metric["weights"] = weights[batch]
        state = reducer.accumulate(metric)
    cells = state.cells
    keys = ranking.order_keys(scores)
    cell = np.searchsorted(cells.lo, keys, "right") - 1
    distance = (keys - cells.lo[cell]).astype(np.float64)
    for is_positive, moment in ((labels, cells.positive_moment), (~labels, cells.negative_moment)):
        expected = np.bincount(cell, weights=np.where(is_positive, weights * distance, 0.0), minlength=len(cells.lo))
        np.testing.assert_allclose(moment, expected, rtol=1e-9)


def test_of_equal_costs_the_lowest_links_are_chosen():
    rng = np.random.default_rng(8)
    costs = rng.integers(0, 4, 20_000).astype(np.float64)  # thousands of ties at every value
    for count in (1, 100, 4999, 5000, 5001, 12_345, 20_000):
        expected = np.zeros(len(costs), bool)
        expected[np.argsort(costs, kind="stable")[:count]] = True
        np.testing.assert_array_equal(cells_math._cheapest(costs, count), expected)


def test_cells_merged_at_equal_costs_are_the_same_on_every_numpy():
    # Alternating labels at evenly spaced keys: every link costs the same. The choice among
    # equal costs was left to np.argpartition, whose SIMD kernels (NumPy 2) chose other
    # links than NumPy 1's: the same examples gave other cells, and another AUC.
    keys = 1000 * np.arange(4096)
    cells = cells_math.cells_from_points(keys, np.arange(4096) % 2 == 0)
    merged = cells_math.merge_cells(cells, 3000)
    # The lowest links go first, in every round: the top of the keys stays single points.
    widths = merged.hi - merged.lo
    first_single = np.flatnonzero(widths > 0)[-1] + 1
    assert first_single < len(merged.lo) - 1000
    assert np.all(widths[first_single:] == 0)
    np.testing.assert_array_equal(merged.lo[first_single:], keys[-(len(merged.lo) - first_single) :])


def test_cells_of_one_label_merge_before_cells_of_opposite_labels_however_wide():
    # Two heavy negative cells far apart, then a light positive and negative close together.
    keys = np.array([0, 10**15, 10**15 + 1, 10**15 + 2])
    cells = cells_math.cells_from_points(
        keys, np.array([False, False, True, False]), np.array([100.0, 100.0, 1.0, 1.0])
    )
    merged = cells_math.merge_cells(cells, 3)
    # Merging the negatives costs no pair of opposite labels; merging the other two costs one.
    assert merged.lo.tolist() == [0, 10**15 + 1, 10**15 + 2]


def test_the_state_is_bounded_and_pickles_compactly(monkeypatch):
    monkeypatch.setattr(binned_module, "_CHUNK_EXAMPLES", 1000)
    rng = np.random.default_rng(3)
    reducer = BinnedRocAuc(bins=64)
    for _ in range(20):
        state = reducer.accumulate({"labels": rng.random(1000) < 0.5, "predictions": rng.random(1000)})
    assert len(state.cells.lo) <= 64
    assert len(pickle.dumps(state)) < 64 * 64 + 1000
    assert repr(state).startswith("ScoreCells(64 cells")


def test_a_state_is_a_snapshot():
    reducer = BinnedRocAuc()
    first = reducer.accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    second = reducer.accumulate({"labels": [0, 1], "predictions": [0.9, 0.2]})
    assert reducer.cross_slot_reduce([first]) == 1.0
    assert reducer.cross_slot_reduce([second]) == 0.5


def test_float32_and_float64_scores_share_one_key_space():
    float32_state = BinnedRocAuc().accumulate({"labels": [0, 1], "predictions": np.array([0.25, 0.5], np.float32)})
    float64_state = BinnedRocAuc().accumulate({"labels": [1, 0], "predictions": [0.25, 0.75]})
    # 0.25 ties across the workers, exactly: the bound stays 0.
    reducer = BinnedRocAuc()
    expected = roc_auc_score([0, 1, 1, 0], [0.25, 0.5, 0.25, 0.75])
    assert reducer.cross_slot_reduce([float32_state, float64_state]) == pytest.approx(expected, rel=1e-12)
    assert reducer.last_error_bound == 0.0


def test_states_of_the_other_kind_are_rejected():
    cells_state = BinnedRocAuc().accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    with pytest.raises(TypeError, match="expected states of type tuple"):
        BinnedRocAuc(bins=np.linspace(0, 1, 5)).cross_slot_reduce([cells_state])
    assert isinstance(cells_state, ScoreCells)


def test_fixed_edges_and_extreme_probabilities_land_in_the_edge_bins():
    reducer = BinnedRocAuc(bins=np.linspace(0.1, 0.9, 7))
    positive_counts, negative_counts = reducer.accumulate({"labels": [1, 0, 1, 0], "predictions": [1.0, 0.0, 0.0, 1.0]})
    assert positive_counts.tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    assert negative_counts.tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    assert reducer.cross_slot_reduce([(positive_counts, negative_counts)]) == 0.5


def test_fixed_bin_states_merge_by_summing_and_become_float_with_weights():
    reducer = BinnedRocAuc(bins=np.linspace(0.0, 1.0, 17))
    unweighted = reducer.accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    assert unweighted[0].dtype == np.int64
    weighted = reducer.accumulate({"labels": [1], "predictions": [0.01], "weights": [0.5]})
    assert weighted[0].dtype == np.float64
    assert weighted[0].sum() == 1.5
    other = BinnedRocAuc(bins=np.linspace(0.0, 1.0, 17)).accumulate({"labels": [0], "predictions": [0.95]})
    # positives: 0.9 (w 1), 0.01 (w .5); negatives: 0.2, 0.95; all in different bins.
    assert reducer.cross_slot_reduce([weighted, other]) == pytest.approx((1.0 * 1 + 0.5 * 0) / (1.5 * 2))
    assert unweighted[0].sum() == 1  # states are copies


def test_fixed_bin_states_of_other_bins_are_rejected():
    state = BinnedRocAuc(bins=np.linspace(0.0, 1.0, 15)).accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    with pytest.raises(ValueError, match="of 17 bins each"):
        BinnedRocAuc(bins=np.linspace(0.0, 1.0, 16)).cross_slot_reduce([state])


def test_the_error_bound_can_be_the_reported_value(monkeypatch):
    monkeypatch.setattr(binned_module, "_CHUNK_EXAMPLES", 100)
    rng = np.random.default_rng(4)
    batches = [{"labels": rng.integers(0, 2, 100), "predictions": np.round(rng.random(100), 2)} for _ in range(5)]
    auc_reducer, bound_reducer = BinnedRocAuc(bins=8), BinnedRocAuc(bins=8, value="error_bound")
    for batch in batches:
        state, bound_state = auc_reducer.accumulate(batch), bound_reducer.accumulate(batch)
    bound = auc_reducer.error_bound([state])
    assert 0 < bound == bound_reducer.cross_slot_reduce([bound_state])
    assert auc_reducer.cross_slot_reduce([state]) != bound


def test_an_unknown_value_is_rejected():
    with pytest.raises(
        ValueError, match=r"Argument `value` must be one of \['auc', 'error_bound'\]. Received: value='bound'"
    ):
        BinnedRocAuc(value="bound")
