"""ScoreSamples (the exact ranking state) and the ranking math behind it."""

import pickle
import re

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from det_estimator.reducers import AveragePrecision, RocAuc, ScoreSamples
from det_estimator.reducers import _ranking as ranking
from det_estimator.reducers import _validation as validation


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_order_keys_sort_like_the_floats(dtype):
    info = np.finfo(dtype)
    special = [-np.inf, -info.max, -1.0, -info.tiny, -info.smallest_subnormal, -0.0, 0.0]
    special += [info.smallest_subnormal, info.tiny, 1.0, info.max, np.inf]
    rng = np.random.default_rng(0)
    values = np.concatenate([np.array(special, dtype), rng.normal(scale=100, size=1000).astype(dtype)])
    keys = ranking.order_keys(values)
    assert keys.dtype == (np.int32 if dtype == np.float32 else np.int64)
    order = np.argsort(values, kind="stable")
    assert np.all(np.diff(keys[order]) >= 0)
    # Equal floats, -0.0 and 0.0 included, get equal keys; different floats different keys.
    assert np.array_equal(np.diff(keys[order]) == 0, np.diff(values[order]) == 0)


def test_order_keys_do_not_modify_the_input():
    values = np.array([-1.0, -0.0, 2.0], np.float32)
    ranking.order_keys(values)
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
    single = ranking.binary_roc_auc(*args, num_threads=1)
    assert single == pytest.approx(roc_auc_score(labels, scores, sample_weight=weights), rel=1e-12)
    for threads in (2, 3, 5):
        assert ranking.binary_roc_auc(*args, num_threads=threads) == pytest.approx(single, rel=1e-13)


def test_parallel_map_starts_the_costliest_items_first_and_keeps_input_order():
    started = []

    def square(item):
        started.append(item)
        return item * item

    items = [1, 9, 2, 7, 3]
    assert ranking._parallel_map(square, items, threads=2, cost=lambda item: item) == [1, 81, 4, 49, 9]
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_from_keys_inverts_order_keys(dtype):
    values = np.array([-np.inf, -2.5, -0.0, 0.0, 1e-30, 3.0, np.inf], dtype)
    restored = ranking.scores_from_keys(ranking.order_keys(values))
    assert restored.dtype == dtype and restored.tolist() == values.tolist()


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("weighted", [False, True])
def test_sort_keys_sorts_on_threads_and_moves_weights_along(threads, weighted):
    rng = np.random.default_rng(threads)
    keys = rng.integers(-50, 50, 1001).astype(np.int32)
    weights = keys * 10.0 + 0.5 if weighted else None
    sorted_keys, sorted_weights = ranking.sort_keys(keys.copy(), weights, num_threads=threads)
    assert sorted_keys.tolist() == sorted(keys.tolist())
    if weighted:
        assert np.array_equal(sorted_weights, sorted_keys * 10.0 + 0.5)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_merge_sorted_runs_merges_on_threads_and_sorts_what_is_not_sorted(threads):
    rng = np.random.default_rng(5)
    runs = [np.sort(rng.integers(0, 100, size)) for size in (0, 7, 300, 1, 55)] + [rng.integers(0, 100, 40)]
    weight_runs = [run * 2.0 for run in runs]
    keys, weights = ranking.merge_sorted_runs(runs, weight_runs, num_threads=threads)
    assert keys.tolist() == sorted(np.concatenate(runs).tolist())
    assert np.array_equal(weights, keys * 2.0)
    assert ranking.merge_sorted_runs(runs, num_threads=threads)[0].tolist() == keys.tolist()


def reduce_in_batches(make_reducer, labels, scores, weights=None, workers=3):
    """Round-robin batches of 1 to 40 examples over several workers, states through pickle."""
    rng = np.random.default_rng(0)
    states = []
    for worker in range(workers):
        reducer, start, rows, state = make_reducer(), 0, np.arange(worker, len(labels), workers), None
        while start < len(rows):
            batch = rows[start : start + int(rng.integers(1, 41))]
            metric = {"labels": labels[batch], "predictions": scores[batch]}
            if weights is not None and worker != 1:  # worker 1 has no weights: ones
                metric["weights"] = weights[batch]
            state = reducer.accumulate(metric)
            start += len(batch)
        states.append(pickle.loads(pickle.dumps(state)))
    return make_reducer().cross_slot_reduce(states)


@pytest.mark.parametrize("chunk", [1, 50, 1 << 16])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(
    ("reducer_type", "reference"), [(RocAuc, roc_auc_score), (AveragePrecision, average_precision_score)]
)
def test_batches_split_in_chunks_give_the_sklearn_value(monkeypatch, chunk, weighted, reducer_type, reference):
    from det_estimator.reducers import _roc_auc

    monkeypatch.setattr(_roc_auc, "_CHUNK_EXAMPLES", chunk)
    rng = np.random.default_rng(6)
    labels = rng.random(2000) < 0.3
    scores = np.round(rng.normal(size=2000) + labels, 1).astype(np.float32)
    weights = rng.uniform(0, 2, 2000) * (rng.random(2000) > 0.2) if weighted else None
    expected_weights = None
    if weighted:
        expected_weights = weights.copy()
        expected_weights[1::3] = 1.0
    expected = reference(labels, scores, sample_weight=expected_weights)
    assert reduce_in_batches(reducer_type, labels, scores, weights) == pytest.approx(expected, rel=1e-12)


def test_a_state_stays_a_snapshot_across_chunk_splits(monkeypatch):
    from det_estimator.reducers import _roc_auc

    monkeypatch.setattr(_roc_auc, "_CHUNK_EXAMPLES", 3)
    reducer = RocAuc()
    first = reducer.accumulate({"labels": [0, 1], "predictions": [0.1, 0.9]})
    for _ in range(5):
        last = reducer.accumulate({"labels": [0, 1], "predictions": [0.8, 0.2]})
    assert first.num_examples == 2 and last.num_examples == 12
    assert reducer.cross_slot_reduce([first]) == 1.0
    assert reducer.cross_slot_reduce([last]) == pytest.approx(roc_auc_score([0, 1] * 6, [0.1, 0.9] + [0.8, 0.2] * 5))


def test_the_reducer_does_not_keep_the_callers_arrays():
    reducer = RocAuc()
    labels, scores = np.array([0, 1, 1, 0]), np.array([0.1, 0.9, 0.8, 0.2])
    state = reducer.accumulate({"labels": labels, "predictions": scores})
    labels[:], scores[:] = 1 - labels, 0.0  # the caller reuses its buffers for the next batch
    assert reducer.cross_slot_reduce([state]) == 1.0


@pytest.mark.parametrize(
    "labels",
    [
        np.array([0, 1, 1, 0]),
        np.array([0, 1, 1, 0], np.uint8),
        np.array([False, True, True, False]),
        np.array([0.0, 1.0, 1.0, -0.0], np.float32),
        np.array([0.0, 1.0, 1.0, 0.0], np.float16),
        np.array([0, 1, 2, 0]),
        np.array([0, 1, -1, 0]),
        np.array([0.0, 1.0, 0.5, 0.0]),
        np.array([0.0, 1.0, np.nan, 0.0]),
    ],
)
@pytest.mark.parametrize(
    "predictions", [np.array([0.1, 0.4, np.inf, -1.0]), np.array([0.1, np.nan, 0.3, 0.2]), np.array([1, 2, 3, 4])]
)
def test_the_quick_batch_check_agrees_with_the_thorough_one(labels, predictions):
    def thorough():
        batch = validation.parse_labeled_batch(
            "R", {"labels": labels, "predictions": predictions}, allow_inf_predictions=True
        )
        return validation.binary_labels("R", batch.labels), batch.predictions

    def quick():
        batch = validation.parse_binary_batch(
            "R", {"labels": labels, "predictions": predictions}, allow_inf_predictions=True
        )
        return batch.is_positive, batch.predictions

    try:
        expected = thorough()
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            quick()
    else:
        is_positive, scores = quick()
        assert is_positive.tolist() == expected[0].tolist() and np.array_equal(scores, expected[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hay_size", [1, 2, 1000])
def test_lookup_ranks_match_binary_search(dtype, hay_size):
    rng = np.random.default_rng(hay_size)
    extremes = np.array([-np.inf, -np.finfo(dtype).max, -1e-30, 0.0, 1e-30, np.finfo(dtype).max, np.inf], dtype)
    hay = np.sort(ranking.order_keys(np.concatenate([rng.normal(size=hay_size).astype(dtype), extremes])[:hay_size]))
    needles = ranking.order_keys(np.concatenate([rng.normal(size=5000).astype(dtype), extremes, np.repeat(hay, 3)]))
    table = ranking._lookup_table(hay)
    left, right = ranking._ranks(hay, table, needles)
    assert np.array_equal(left, np.searchsorted(hay, needles, "left"))
    assert np.array_equal(right, np.searchsorted(hay, needles, "right"))


@pytest.mark.parametrize("positive_fraction", [0.03, 0.97])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(
    ("reducer_type", "reference"), [(RocAuc, roc_auc_score), (AveragePrecision, average_precision_score)]
)
def test_one_local_state_is_ranked_by_lookup_and_matches_sklearn(positive_fraction, weighted, reducer_type, reference):
    # One class over 8 times larger than the other, on one unpickled state: the larger
    # class is placed by lookup table (for average precision, when it is the negatives).
    rng = np.random.default_rng(7)
    labels = rng.random(20_000) < positive_fraction
    scores = np.round(rng.normal(size=20_000) + labels, 2).astype(np.float32)
    weights = rng.uniform(0.1, 2, 20_000) if weighted else None
    reducer = reducer_type()
    for start in range(0, 20_000, 1000):
        batch = {"labels": labels[start : start + 1000], "predictions": scores[start : start + 1000]}
        if weighted:
            batch["weights"] = weights[start : start + 1000]
        state = reducer.accumulate(batch)
    expected = reference(labels, scores, sample_weight=weights)
    assert reducer.cross_slot_reduce([state]) == pytest.approx(expected, rel=1e-12)
