"""Accuracy and mechanics of BinnedRocAuc."""

import pickle

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from det_estimator.reducers import BinnedRocAuc


def reduce(reducer, batches):
    states = [pickle.loads(pickle.dumps(reducer.accumulate(batch))) for batch in batches]
    return reducer.cross_slot_reduce(states[-1:])


@pytest.fixture(scope="module")
def rare_positives():
    """1e6 float32 probabilities peaked near 0, 2% positives."""
    rng = np.random.default_rng(2024)
    n = 1_000_000
    labels = rng.random(n) < 0.02
    logits = np.where(labels, rng.normal(-3.0, 1.0, n), rng.normal(-4.5, 1.0, n))
    probabilities = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return labels, probabilities, roc_auc_score(labels, probabilities)


def test_default_bins_resolve_probabilities_peaked_near_zero(rare_positives):
    labels, probabilities, exact = rare_positives
    reducer = BinnedRocAuc()
    assert reducer.num_bins <= 4096
    batches = [
        {"labels": labels[i : i + 250_000], "predictions": probabilities[i : i + 250_000]}
        for i in range(0, len(labels), 250_000)
    ]
    binned = reduce(reducer, batches)
    assert abs(binned - exact) < 1e-5
    assert abs(binned - exact) <= reducer.last_error_bound


def test_uniform_probability_thresholds_do_not(rare_positives):
    labels, probabilities, exact = rare_positives
    # 200 uniform thresholds on [0, 1], as Keras' AUC metric uses by default.
    reducer = BinnedRocAuc(bins=np.linspace(0.0, 1.0, 201))
    binned = reduce(reducer, [{"labels": labels, "predictions": probabilities}])
    assert abs(binned - exact) > 1e-3
    assert abs(binned - exact) <= reducer.last_error_bound


def test_error_bound_holds_with_coarse_bins_and_ties():
    rng = np.random.default_rng(0)
    labels = rng.random(5000) < 0.4
    scores = np.round(rng.normal(size=5000) + labels, 1)
    weights = rng.uniform(0, 1, 5000)
    for bins in (3, 17, 256):
        reducer = BinnedRocAuc(bins=bins, scores="logits", logit_range=3.0)
        state = reducer.accumulate({"labels": labels, "predictions": scores, "weights": weights})
        binned = reducer.cross_slot_reduce([state])
        exact = roc_auc_score(labels, scores, sample_weight=weights)
        assert abs(binned - exact) <= reducer.last_error_bound
        assert reducer.error_bound([state]) == reducer.last_error_bound


def test_logits_and_probabilities_fall_in_the_same_bins():
    rng = np.random.default_rng(1)
    labels = rng.random(20000) < 0.3
    logits = rng.normal(scale=5.0, size=20000) + labels
    probabilities = 1.0 / (1.0 + np.exp(-logits))
    from_logits = BinnedRocAuc(bins=512, scores="logits")
    from_probabilities = BinnedRocAuc(bins=512)
    logit_state = from_logits.accumulate({"labels": labels, "predictions": logits})
    probability_state = from_probabilities.accumulate({"labels": labels, "predictions": probabilities})
    # Scores within rounding of a bin edge may land on either side of it.
    for logit_counts, probability_counts in zip(logit_state, probability_state):
        assert np.abs(logit_counts - probability_counts).sum() <= 4


def test_extreme_probabilities_land_in_the_edge_bins():
    reducer = BinnedRocAuc(bins=8)
    positive_counts, negative_counts = reducer.accumulate({"labels": [1, 0, 1, 0], "predictions": [1.0, 0.0, 0.0, 1.0]})
    assert positive_counts.tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    assert negative_counts.tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    assert reducer.cross_slot_reduce([(positive_counts, negative_counts)]) == 0.5


def test_states_merge_by_summing_and_become_float_with_weights():
    reducer = BinnedRocAuc(bins=16)
    unweighted = reducer.accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    assert unweighted[0].dtype == np.int64
    weighted = reducer.accumulate({"labels": [1], "predictions": [0.01], "weights": [0.5]})
    assert weighted[0].dtype == np.float64
    assert weighted[0].sum() == 1.5
    other = BinnedRocAuc(bins=16).accumulate({"labels": [0], "predictions": [0.95]})
    # positives: 0.9 (w 1), 0.01 (w .5); negatives: 0.2, 0.95; all in different bins.
    assert reducer.cross_slot_reduce([weighted, other]) == pytest.approx((1.0 * 1 + 0.5 * 0) / (1.5 * 2))


def test_states_of_other_bins_are_rejected():
    state = BinnedRocAuc(bins=16).accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    with pytest.raises(ValueError, match="of 4096 bins each"):
        BinnedRocAuc().cross_slot_reduce([state])


def test_state_is_a_copy():
    reducer = BinnedRocAuc(bins=16)
    first = reducer.accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    reducer.accumulate({"labels": [0, 1], "predictions": [0.2, 0.9]})
    assert first[0].sum() == 1


def test_the_error_bound_can_be_the_reported_value():
    rng = np.random.default_rng(4)
    batch = {"labels": rng.integers(0, 2, 500), "predictions": np.round(rng.random(500), 2)}
    auc_reducer, bound_reducer = BinnedRocAuc(bins=64), BinnedRocAuc(bins=64, value="error_bound")
    state = auc_reducer.accumulate(batch)
    assert bound_reducer.cross_slot_reduce([bound_reducer.accumulate(batch)]) == auc_reducer.error_bound([state])
    assert auc_reducer.cross_slot_reduce([state]) != auc_reducer.error_bound([state])


def test_an_unknown_value_is_rejected():
    with pytest.raises(
        ValueError, match=r"Argument `value` must be one of \['auc', 'error_bound'\]. Received: value='bound'"
    ):
        BinnedRocAuc(value="bound")
