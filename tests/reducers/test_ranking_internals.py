"""ScoreSamples (the exact ranking state) and the ranking math behind it."""

import pickle

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from det_estimator.reducers import AveragePrecision, RocAuc, ScoreSamples
from det_estimator.reducers import _functional as functional


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_order_keys_sort_like_the_floats(dtype):
    info = np.finfo(dtype)
    special = [-np.inf, -info.max, -1.0, -info.tiny, -info.smallest_subnormal, -0.0, 0.0]
    special += [info.smallest_subnormal, info.tiny, 1.0, info.max, np.inf]
    rng = np.random.default_rng(0)
    values = np.concatenate([np.array(special, dtype), rng.normal(scale=100, size=1000).astype(dtype)])
    keys = functional.order_keys(values)
    assert keys.dtype == (np.int32 if dtype == np.float32 else np.int64)
    order = np.argsort(values, kind="stable")
    assert np.all(np.diff(keys[order]) >= 0)
    # Equal floats, -0.0 and 0.0 included, get equal keys; different floats different keys.
    assert np.array_equal(np.diff(keys[order]) == 0, np.diff(values[order]) == 0)


def test_order_keys_do_not_modify_the_input():
    values = np.array([-1.0, -0.0, 2.0], np.float32)
    functional.order_keys(values)
    assert values.tolist() == [-1.0, -0.0, 2.0] and np.signbit(values[1])


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("positive_fraction", [0.02, 0.5, 0.97])
def test_threaded_auc_equals_single_threaded(weighted, positive_fraction):
    rng = np.random.default_rng(1)
    n = 4001
    labels = rng.random(n) < positive_fraction
    scores = np.round(rng.normal(size=n) + labels, 2).astype(np.float32)
    weights = rng.uniform(0.1, 2, n) if weighted else None
    args = (scores[labels], scores[~labels])
    if weighted:
        args += (weights[labels], weights[~labels])
    single = functional.binary_roc_auc(*args, num_threads=1)
    assert single == pytest.approx(roc_auc_score(labels, scores, sample_weight=weights), rel=1e-12)
    for threads in (2, 3, 5):
        assert functional.binary_roc_auc(*args, num_threads=threads) == pytest.approx(single, rel=1e-13)


def test_parallel_map_starts_the_costliest_items_first_and_keeps_input_order():
    started = []

    def square(item):
        started.append(item)
        return item * item

    items = [1, 9, 2, 7, 3]
    assert functional._parallel_map(square, items, threads=2, cost=lambda item: item) == [1, 81, 4, 49, 9]
    # Two threads take the two costliest items before any other.
    assert set(started[:2]) == {9, 7}
    assert sorted(started) == sorted(items)


def test_state_keeps_float32_scores_and_no_labels():
    reducer = RocAuc()
    rng = np.random.default_rng(2)
    for _ in range(10):
        state = reducer.accumulate(
            {"labels": rng.random(1000) < 0.5, "predictions": rng.random(1000).astype(np.float32)}
        )
    assert state.positives.dtype == np.float32 and state.negatives.dtype == np.float32
    assert state.positive_weights is None and state.num_examples == 10_000
    # 4 bytes per example and a small constant overhead.
    assert len(pickle.dumps(state)) < 4 * 10_000 + 1000


def test_state_is_a_snapshot_of_the_batches_so_far():
    reducer = RocAuc()
    first = reducer.accumulate({"labels": [0, 1], "predictions": [0.1, 0.9]})
    second = reducer.accumulate({"labels": [0, 1], "predictions": [0.8, 0.2]})
    assert first.num_examples == 2 and second.num_examples == 4
    assert reducer.cross_slot_reduce([first]) == 1.0
    assert reducer.cross_slot_reduce([second]) == 0.75  # 3 of the 4 pairs are ordered


def test_state_round_trips_through_pickle():
    state = ScoreSamples(np.array([0.5, 0.7]), np.array([0.1]), np.array([1.0, 2.0]), np.array([3.0]))
    restored = pickle.loads(pickle.dumps(state))
    assert restored.positives.tolist() == [0.5, 0.7]
    assert restored.negative_weights.tolist() == [3.0]
    assert repr(restored) == "ScoreSamples(2 positives, 1 negatives, weighted)"


def test_weights_given_for_some_batches_count_others_once():
    reducer = AveragePrecision()
    reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.3, 0.2, 0.9]})
    state = reducer.accumulate({"labels": [0, 1], "predictions": [0.5, 0.4], "weights": [2.0, 0.0]})
    assert state.positive_weights.tolist() == [1.0, 1.0]  # the weight-0 positive is dropped
    assert state.negative_weights.tolist() == [1.0, 2.0]
    labels, scores, weights = [0, 1, 1, 0, 1], [0.3, 0.2, 0.9, 0.5, 0.4], [1, 1, 1, 2, 0]
    expected = average_precision_score(labels, scores, sample_weight=weights)
    assert reducer.cross_slot_reduce([state]) == pytest.approx(expected, rel=1e-12)


def test_mixed_score_dtypes_across_workers():
    rng = np.random.default_rng(3)
    labels = rng.random(200) < 0.5
    scores = rng.random(200)
    float32_state = RocAuc().accumulate({"labels": labels[:100], "predictions": scores[:100].astype(np.float32)})
    int_state = RocAuc().accumulate({"labels": labels[100:], "predictions": np.round(scores[100:] * 10).astype(int)})
    combined = np.concatenate([scores[:100].astype(np.float32), np.round(scores[100:] * 10)])
    result = RocAuc().cross_slot_reduce([float32_state, int_state])
    assert result == pytest.approx(roc_auc_score(labels, combined), rel=1e-12)


def test_score_samples_rejects_inconsistent_weights():
    with pytest.raises(ValueError, match="both classes or for neither"):
        ScoreSamples(np.zeros(2), np.zeros(1), np.ones(2), None)
