"""ScoreSamples (the exact ranking state) and the ranking math behind it."""

import pickle
import re

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from det_estimator.reducers import AveragePrecision, RocAuc, ScoreSamples
from det_estimator.reducers import _ranking as ranking
from det_estimator.reducers import _validation as validation

# Every test runs with the native ranking kernels and again with NumPy alone.
pytestmark = pytest.mark.usefixtures("ranking_kernels")


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
@pytest.mark.parametrize(
    ("metric", "reference"),
    [(ranking.binary_roc_auc, roc_auc_score), (ranking.binary_average_precision, average_precision_score)],
)
def test_the_functions_of_class_scores_match_sklearn_on_any_threads(weighted, positive_fraction, metric, reference):
    rng = np.random.default_rng(1)
    n = 4001
    labels = rng.random(n) < positive_fraction
    scores = np.round(rng.normal(size=n) + labels, 2).astype(np.float32)
    weights = rng.uniform(0.1, 2, n) if weighted else None
    args = (scores[labels], scores[~labels])
    if weighted:
        args += (weights[labels], weights[~labels])
    single = metric(*args, num_threads=1)
    assert single == pytest.approx(reference(labels, scores, sample_weight=weights), rel=1e-12)
    for threads in (2, 3, 5):
        assert metric(*args, num_threads=threads) == pytest.approx(single, rel=1e-13)


def test_parallel_map_starts_the_costliest_items_first_and_keeps_input_order():
    started = []

    def square(item):
        started.append(item)
        return item * item

    items = [1, 9, 2, 7, 3]
    assert ranking.parallel_map(square, items, threads=2, cost=lambda item: item) == [1, 81, 4, 49, 9]
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


@pytest.mark.parametrize(
    "labels",
    [
        np.array([0, 1, 1, 0]),
        *(np.array([0, 1, 1, 0], dtype) for dtype in (np.int8, np.uint16, np.int32, np.uint64)),
        np.array([[False], [True], [True], [False]]),
        np.array([0.0, 1.0, 1.0, -0.0]),
        np.array([0.0, 1.0, 1.0, 0.0], np.float16),
        np.array([0, 1, 2, 0], np.uint8),
        np.array([0, 1, -1, 0], np.int8),
        np.array([0, 1, -(2**62), 0]),
        np.array([0.0, 1.0, 0.5, 0.0], np.float32),
        np.array([0.0, 1.0, np.nan, 0.0]),
        np.array([0, 1, 1]),
    ],
)
@pytest.mark.parametrize(
    "predictions",
    [
        np.array([0.1, 0.4, np.inf, -1.0]),
        np.array([[0.1], [0.4], [0.3], [0.3]], np.float32),
        np.array([0.1, np.nan, 0.3, 0.2], np.float32),
        np.array([1, 2, 3, 4]),
    ],
)
def test_every_batch_is_taken_or_refused_as_the_thorough_check_does(labels, predictions):
    # A first valid batch starts the chunk; the second takes the native path where it can.
    first = {"labels": np.array([1, 0]), "predictions": np.array([0.5, 0.5], predictions.dtype)}
    batch = {"labels": labels, "predictions": predictions}
    try:
        validation.parse_binary_batch("RocAuc", batch, allow_inf_predictions=True)
    except ValueError as error:
        reducer = RocAuc()
        reducer.accumulate(first)
        with pytest.raises(ValueError, match=re.escape(str(error))):
            reducer.accumulate(batch)
        state = reducer.accumulate(first)  # the refused batch left nothing behind
        assert state.num_examples == 4
        return
    reducer = RocAuc()
    reducer.accumulate(first)
    state = reducer.accumulate(batch)
    expected_labels = np.concatenate([[1, 0], labels.reshape(-1)])
    expected_scores = np.concatenate([first["predictions"], predictions.reshape(-1)])
    kept = expected_scores[expected_labels == 1].astype(ranking.score_dtype(predictions.dtype))
    np.testing.assert_array_equal(state.positives, np.sort(kept))
    finite = np.clip(expected_scores, -1e300, 1e300)  # scikit-learn refuses infinities; the order is the same
    assert reducer.cross_slot_reduce([state]) == pytest.approx(roc_auc_score(expected_labels, finite), rel=1e-12)


def test_usual_batches_are_checked_and_copied_without_the_python_checks(monkeypatch, ranking_kernels):
    checked = []
    parse = validation.parse_binary_batch
    monkeypatch.setattr(
        validation, "parse_binary_batch", lambda *args, **kwargs: checked.append(1) or parse(*args, **kwargs)
    )
    reducer = AveragePrecision()
    rng = np.random.default_rng(4)
    for _ in range(100):  # over a chunk's end
        state = reducer.accumulate({"labels": rng.integers(0, 2, 1000), "predictions": rng.random(1000)})
    # The native kernels take every batch but the first of the reducer; NumPy's path checks each one.
    assert len(checked) == (1 if ranking_kernels == "native" else 100)
    assert state.num_examples == 100_000


def examples_of(labels, scores, weights=None):
    scores = np.asarray(scores)
    return ranking.labeled(scores.copy(), np.asarray(labels, bool), None if weights is None else np.asarray(weights))


@pytest.mark.parametrize(
    ("scores", "embedded", "key_dtype"),
    [
        (np.array([0.0, 1.0, 0.5, -0.0, 1.9999], np.float32), True, np.int32),  # probabilities and (-2, 2)
        (np.array([0.1, -1.5, 2.0, -7.0], np.float32), False, np.int32),  # logits need every key bit
        (np.array([0.1, 0.2, 1e-300], np.float64), True, np.int64),
        (np.array([-np.inf, 3.0, np.inf], np.float64), False, np.int64),
        (np.array([0.5, 0.25], np.float16), True, np.int32),
    ],
)
def test_labels_ride_in_the_keys_when_a_bit_is_free(scores, embedded, key_dtype):
    labels = np.arange(len(scores)) % 2 == 0
    examples = examples_of(labels, scores)
    assert (examples.labels is None) == embedded and examples.keys.dtype == key_dtype
    assert ranking.labels_of(examples).tolist() == labels.tolist()
    expected_scores = scores.astype(np.float32 if scores.dtype == np.float16 else scores.dtype) + 0  # -0.0 -> 0.0
    assert ranking.scores_from_keys(ranking.plain_keys(examples)).tolist() == expected_scores.tolist()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scale", [1.0, 8.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sort_orders_by_score_with_negatives_first_among_ties(weighted, scale, dtype):
    rng = np.random.default_rng(11)
    scores = (np.round(rng.uniform(-1, 1, 3000), 2) * scale).astype(dtype)  # scale 8: keys without a free bit
    labels = rng.random(3000) < 0.4
    weights = scores.astype(np.float64) * 10 + 100 if weighted else None
    examples = ranking.sort(examples_of(labels, scores, weights))
    sorted_scores = ranking.scores_from_keys(ranking.plain_keys(examples))
    sorted_labels = ranking.labels_of(examples)
    order = np.lexsort((labels, scores))
    assert sorted_scores.tolist() == scores[order].tolist()
    assert sorted_labels.tolist() == labels[order].tolist()
    if weighted:
        assert np.array_equal(examples.weights, sorted_scores.astype(np.float64) * 10 + 100)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_ranges_join_runs_of_every_form_into_increasing_ranges(threads):
    rng = np.random.default_rng(threads)
    runs, all_scores = [], []
    for dtype, scale, size in [(np.float32, 1, 5000), (np.float32, 9, 300), (np.float64, 1, 2000), (np.float32, 1, 0)]:
        scores = (np.round(rng.uniform(-1, 1, size), 2) * scale).astype(dtype)
        runs.append(ranking.sort(examples_of(rng.random(size) < 0.5, scores)))
        all_scores.append(scores.astype(np.float64))
    parts = ranking.ranges(ranking.common_form(runs), num_threads=threads)
    assert 1 <= len(parts) <= threads
    keys = [ranking.plain_keys(part) for part in parts]
    joined = np.concatenate([ranking.scores_from_keys(k) for k in keys])
    assert joined.tolist() == np.sort(np.concatenate(all_scores)).tolist()
    # Equal scores never straddle two ranges.
    for lower, upper in zip(keys, keys[1:]):
        if len(lower) and len(upper):
            assert lower[-1] < upper[0]


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_position_sums_are_exact(size, fraction):
    labels = np.random.default_rng(size).random(size) < fraction
    for labels01 in (labels, labels.astype(np.int32)):
        positions = np.flatnonzero(labels)
        assert ranking._position_sums(labels01) == (len(positions), int(positions.sum()))


def test_tie_groups_list_every_group_of_equal_scores():
    scores = np.array([0.1, 0.2, 0.2, 0.3, 0.4, 0.4, 0.4, 0.5, 0.5, 0.6], np.float32)
    labels = np.array([0, 0, 1, 1, 1, 0, 1, 0, 0, 1], bool)
    for wide in (False, True):
        examples = ranking.sort(examples_of(labels, scores * (10 if wide else 1)))
        assert (examples.labels is None) != wide
        groups = ranking._tie_groups(examples, ranking.labels_of(examples))
        assert groups.starts.tolist() == [1, 4, 7]
        assert groups.sizes.tolist() == [2, 3, 2]
        assert groups.positives.tolist() == [1, 2, 0]
        assert groups.positives_before.tolist() == [0, 2, 4]
    assert ranking._tie_groups(ranking.sort(examples_of([0, 1], [0.1, 0.2])), np.array([0, 1])) is None
    # Neighbouring keys of opposite signs (-2 and 0) differ in more than the label bit.
    across_zero = ranking.sort(
        examples_of([1, 0], np.array([-np.finfo(np.float32).smallest_subnormal, 0.0], np.float32))
    )
    assert ranking.plain_keys(across_zero).tolist() == [-2, 0]
    assert ranking._tie_groups(across_zero, ranking.labels_of(across_zero)) is None


@pytest.mark.parametrize("dense_share", [0, 4, 10**9])  # 0: positions of the positives; 10**9: every example
@pytest.mark.parametrize("positive_fraction", [0.02, 0.24, 0.26, 0.5, 0.97])
@pytest.mark.parametrize("scale", [0.25, 10.0])
def test_average_precision_over_many_blocks_either_way_of_summing_matches_sklearn(
    monkeypatch, dense_share, positive_fraction, scale
):
    # Blocks of about 64 examples: ties straddle block cuts' neighbours, and many blocks sit above one another.
    monkeypatch.setattr(ranking, "_BLOCK", 64)
    monkeypatch.setattr(ranking, "_DENSE_SHARE", dense_share)
    rng = np.random.default_rng(int(positive_fraction * 100))
    labels = rng.random(6000) < positive_fraction
    scores = (np.round(rng.normal(size=6000) + labels, 2) * scale).astype(np.float32)  # scale 10: labels apart
    examples = ranking.sort(examples_of(labels, scores))
    assert (examples.labels is None) == (scale < 1)
    expected = average_precision_score(labels, scores)
    for threads in (1, 3):
        assert ranking.average_precision([examples], threads) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scale", [1.0, 10.0])
@pytest.mark.parametrize(
    ("reducer_type", "reference"), [(RocAuc, roc_auc_score), (AveragePrecision, average_precision_score)]
)
def test_ranked_ranges_match_sklearn_with_ties_at_every_cut(threads, weighted, scale, reducer_type, reference):
    # Few distinct scores: tie groups are large, and every cut between ranges falls at a group.
    rng = np.random.default_rng(12)
    labels = rng.random(30_000) < 0.3
    scores = (np.round(rng.normal(size=30_000) + labels, 1) / scale).astype(np.float32)
    weights = rng.uniform(0.1, 2, 30_000) if weighted else None
    states = []
    for worker in range(3):
        batch = {"labels": labels[worker::3], "predictions": scores[worker::3]}
        if weighted:
            batch["weights"] = weights[worker::3]
        states.append(pickle.loads(pickle.dumps(reducer_type().accumulate(batch))))
    expected = reference(labels, scores, sample_weight=weights)
    assert reducer_type(num_threads=threads).cross_slot_reduce(states) == pytest.approx(expected, rel=1e-12)


def test_a_state_of_logits_keeps_its_labels_apart_and_probabilities_take_4_bytes():
    rng = np.random.default_rng(13)
    labels = rng.random(10_000) < 0.5
    logits = (rng.normal(size=10_000) * 4).astype(np.float32)
    probabilities = (1 / (1 + np.exp(-logits))).astype(np.float32)
    sizes = {}
    for name, scores in (("logits", logits), ("probabilities", probabilities)):
        state = RocAuc().accumulate({"labels": labels, "predictions": scores})
        sizes[name] = len(pickle.dumps(state))
        assert RocAuc().cross_slot_reduce([state]) == pytest.approx(roc_auc_score(labels, scores), rel=1e-12)
    assert sizes["probabilities"] < 4 * 10_000 + 1000
    assert sizes["logits"] < 5 * 10_000 + 1000


@pytest.mark.parametrize("chunk", [7, 1 << 16])
def test_batches_of_changing_score_dtypes_in_one_reducer(monkeypatch, chunk):
    from det_estimator.reducers import _roc_auc

    monkeypatch.setattr(_roc_auc, "_CHUNK_EXAMPLES", chunk)
    rng = np.random.default_rng(14)
    reducer, all_labels, all_scores, snapshots = AveragePrecision(), [], [], []
    for dtype in (np.float32, np.float64, np.int64, np.float16, np.float32, bool):
        labels = rng.random(10) < 0.5
        scores = (np.round(rng.normal(size=10) * 3, 1) + labels).astype(dtype)
        state = reducer.accumulate({"labels": labels, "predictions": scores})
        all_labels.append(labels)
        all_scores.append(scores.astype(np.float64) if dtype != np.float16 else scores.astype(np.float32))
        snapshots.append((state, np.concatenate(all_labels), np.concatenate(all_scores)))
    for state, labels, scores in snapshots:
        expected = average_precision_score(labels, scores)
        assert AveragePrecision().cross_slot_reduce([state]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("positive_fraction", [0.03, 0.5, 0.97])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scale", [1.0, 10.0])
@pytest.mark.parametrize(
    ("reducer_type", "reference"), [(RocAuc, roc_auc_score), (AveragePrecision, average_precision_score)]
)
def test_one_local_state_matches_sklearn(positive_fraction, weighted, scale, reducer_type, reference):
    # One state, ranked on several threads; a class may be far larger than the other.
    rng = np.random.default_rng(15)
    labels = rng.random(20_000) < positive_fraction
    scores = (np.round(rng.normal(size=20_000) + labels, 2) / scale).astype(np.float32)  # ties; logits at scale 1
    weights = rng.uniform(0.1, 2, 20_000) if weighted else None
    reducer = reducer_type(num_threads=3)
    for start in range(0, 20_000, 1000):
        batch = {"labels": labels[start : start + 1000], "predictions": scores[start : start + 1000]}
        if weighted:
            batch["weights"] = weights[start : start + 1000]
        state = reducer.accumulate(batch)
    expected = reference(labels, scores, sample_weight=weights)
    assert reducer.cross_slot_reduce([state]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("workers", [2, 5])
@pytest.mark.parametrize(
    ("reducer_type", "reference"), [(RocAuc, roc_auc_score), (AveragePrecision, average_precision_score)]
)
def test_states_travel_unsorted_and_are_sorted_once_all_together(monkeypatch, native, workers, reducer_type, reference):
    # Merging runs each worker sorted would cost a second sort of every example.
    if not native:
        monkeypatch.setattr(ranking, "kernels", None)
    monkeypatch.setattr(ranking, "_PARALLEL_MIN_EXAMPLES", 1)
    rng = np.random.default_rng(workers)
    labels = rng.random(30_001) < 0.1
    scores = (np.round(rng.normal(size=30_001) + labels, 2) / 4).astype(np.float32)  # ties
    cuts = np.sort(rng.integers(0, 30_001, workers - 1))  # uneven shares
    states = []
    for share in np.split(np.arange(30_001), cuts):
        reducer = reducer_type()
        for start in range(0, len(share), 1024):
            rows = share[start : start + 1024]
            state = reducer.accumulate({"labels": labels[rows], "predictions": scores[rows]})
        sent = pickle.dumps(state)
        assert state._sorted is None  # sending did not sort it
        states.append(pickle.loads(sent))
    sorts = []
    sort_joined = ranking.sort_joined
    monkeypatch.setattr(ranking, "sort_joined", lambda parts, threads: sorts.append(1) or sort_joined(parts, threads))
    value = reducer_type(num_threads=2).cross_slot_reduce(states)
    assert value == pytest.approx(reference(labels, scores), rel=0, abs=1e-12)
    assert len(sorts) == 1


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("scale", [0.5, 10.0])  # labels in the keys, or apart
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sort_joined_equals_sorting_the_joined_parts(monkeypatch, threads, scale, dtype):
    monkeypatch.setattr(ranking, "_PARALLEL_MIN_EXAMPLES", 1)
    rng = np.random.default_rng(threads)
    parts = []
    for size in (0, 1, 700, 3000, 0, 2500):
        scores = (np.round(rng.normal(size=size), 1) * scale).astype(dtype)  # ties across the parts
        parts.append(ranking.labeled(scores, rng.random(size) < 0.3))
    expected = ranking.sort(ranking.join([part._replace(keys=part.keys.copy()) for part in parts]))
    joined = ranking.sort_joined(parts, threads)
    np.testing.assert_array_equal(ranking.plain_keys(joined), ranking.plain_keys(expected))
    np.testing.assert_array_equal(ranking.labels_of(joined), ranking.labels_of(expected))


def test_usual_float32_batches_are_keyed_without_the_python_checks(monkeypatch, ranking_kernels):
    checked = []
    parse = validation.parse_binary_batch
    monkeypatch.setattr(
        validation, "parse_binary_batch", lambda *args, **kwargs: checked.append(1) or parse(*args, **kwargs)
    )
    reducer, rng = RocAuc(), np.random.default_rng(4)
    labels = rng.integers(0, 2, 100_000)
    scores = rng.random(100_000, dtype=np.float32)
    for start in range(0, 100_000, 1000):  # over a chunk's end
        state = reducer.accumulate(
            {"labels": labels[start : start + 1000], "predictions": scores[start : start + 1000]}
        )
    # The native kernels key every batch, the first included; NumPy's path checks each one.
    assert len(checked) == (0 if ranking_kernels == "native" else 100)
    assert reducer.cross_slot_reduce([state]) == pytest.approx(roc_auc_score(labels, scores), rel=1e-12)


@pytest.mark.parametrize("chunk", [5, 1 << 16])
def test_states_of_keyed_batches_stay_snapshots_whichever_is_sorted_first(monkeypatch, chunk):
    # Keyed batches share their chunk's keys with every state: sorting one state must not
    # reorder what another holds, earlier or later, in the same chunk or after it closed.
    from det_estimator.reducers import _roc_auc

    monkeypatch.setattr(_roc_auc, "_CHUNK_EXAMPLES", chunk)
    rng = np.random.default_rng(21)
    reducer, states = AveragePrecision(), []
    labels = rng.integers(0, 2, 24)
    scores = np.round(rng.random(24), 1).astype(np.float32)
    for start in range(0, 24, 3):
        states.append(
            reducer.accumulate({"labels": labels[start : start + 3], "predictions": scores[start : start + 3]})
        )
    for index in [3, 7, 0, 5, 1, 6, 2, 4, 3, 0]:  # each read, re-read, in no particular order
        size = 3 * (index + 1)
        expected = average_precision_score(labels[:size], scores[:size])
        assert reducer.cross_slot_reduce([states[index]]) == pytest.approx(expected, rel=1e-12), index
        np.testing.assert_array_equal(states[index].positives, np.sort(scores[:size][labels[:size] == 1]))


@pytest.mark.parametrize("chunk", [4, 1 << 16])
@pytest.mark.parametrize(
    ("reducer_type", "reference"), [(RocAuc, roc_auc_score), (AveragePrecision, average_precision_score)]
)
def test_keyed_then_logits_then_weighted_batches_give_the_sklearn_value(monkeypatch, chunk, reducer_type, reference):
    # Batches keyed as they arrive, then scores without a free bit for the label (copied and
    # keyed a chunk at a time from then on), weighted batches, float64 and empty batches.
    from det_estimator.reducers import _roc_auc

    monkeypatch.setattr(_roc_auc, "_CHUNK_EXAMPLES", chunk)
    rng = np.random.default_rng(22)
    reducer, all_labels, all_scores, all_weights, snapshots = reducer_type(), [], [], [], []
    plan = ["probabilities"] * 4 + ["empty", "logits", "probabilities", "weighted", "probabilities", "float64"]
    for kind in plan + ["probabilities"] * 3:
        size = 0 if kind == "empty" else int(rng.integers(1, 9))
        labels = rng.integers(0, 2, size)
        scores = np.round(rng.random(size), 1)
        if kind == "logits":
            scores = np.round(rng.normal(size=size) * 4, 1)
        batch = {"labels": labels, "predictions": scores.astype(np.float64 if kind == "float64" else np.float32)}
        weights = np.ones(size)
        if kind == "weighted":
            weights = np.round(rng.uniform(0, 2, size), 1)
            batch["weights"] = weights
        state = reducer.accumulate(batch)
        (
            all_labels.append(labels),
            all_scores.append(batch["predictions"].astype(np.float64)),
            all_weights.append(weights),
        )
        snapshots.append((state, *(np.concatenate(column) for column in (all_labels, all_scores, all_weights))))
    for state, labels, scores, weights in snapshots[::-1]:
        expected = reference(labels, scores, sample_weight=weights)
        assert reducer.cross_slot_reduce([state]) == pytest.approx(expected, rel=1e-12)


def test_a_refused_batch_leaves_the_keyed_chunk_as_it_was(ranking_kernels):
    reducer = RocAuc()
    reducer.accumulate({"labels": np.array([0, 1]), "predictions": np.array([0.2, 0.7], np.float32)})
    for labels, scores, message in (
        (np.array([0, 1, 1]), np.array([0.3, np.nan, 0.1], np.float32), "NaN"),
        (np.array([0, 2, 1]), np.array([0.3, 0.4, 0.1], np.float32), "must be binary"),
    ):
        with pytest.raises(ValueError, match=message):
            reducer.accumulate({"labels": labels, "predictions": scores})
    state = reducer.accumulate({"labels": np.array([1, 0]), "predictions": np.array([0.1, 0.9], np.float32)})
    assert state.num_examples == 4
    assert reducer.cross_slot_reduce([state]) == pytest.approx(roc_auc_score([0, 1, 1, 0], [0.2, 0.7, 0.1, 0.9]))
