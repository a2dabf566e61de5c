"""The native kernels of the exact ranking metrics, against NumPy and scikit-learn."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from det_estimator.reducers import _ranking as ranking

kernels = ranking.kernels


def test_the_kernels_are_built():
    # setup.py builds them as an optional extension: a failed build must not pass unnoticed here.
    assert kernels is not None, "det_estimator/reducers/_ranking_kernels.c did not build; reinstall with a C compiler"


needs_kernels = pytest.mark.skipif(kernels is None, reason="the native ranking kernels are not built")


@needs_kernels
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("size", [0, 1, 2, 255, 256, 257, 10_000])
@pytest.mark.parametrize("spread", ["full", "narrow", "constant", "sorted", "reversed"])
def test_sort_matches_numpy(dtype, size, spread):
    rng = np.random.default_rng(size)
    info = np.iinfo(dtype)
    keys = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
    if spread == "narrow":  # most bytes the same for every key: those passes are skipped
        keys = rng.integers(-3, 300, size).astype(dtype)
    elif spread == "constant":
        keys = np.full(size, info.min if size % 2 else 7, dtype)
    elif spread == "sorted":
        keys.sort()
    elif spread == "reversed":
        keys = np.sort(keys)[::-1].copy()
    if size >= 2:
        keys[:2] = [info.max, info.min]
    expected = np.sort(keys)
    kernels.sort(keys)
    np.testing.assert_array_equal(keys, expected)


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("positive_fraction", [0.0, 0.02, 0.5, 1.0])
@pytest.mark.parametrize("ties", [False, True])
def test_each_pass_matches_its_numpy_twin_and_sklearn(dtype, positive_fraction, ties):
    rng = np.random.default_rng(3)
    size = 5000
    is_positive = rng.random(size) < positive_fraction
    scores = rng.normal(0.0, 0.4, size) + 0.3 * is_positive
    if ties:
        scores = np.round(scores, 1)
    examples = ranking.sort(ranking.labeled(scores.astype(dtype), is_positive))
    assert examples.labels is None  # scores in (-2, 2): labels ride in the keys
    positives = int(is_positive.sum())
    counts = ranking._Counts(positives, size - positives)

    assert kernels.count_positives(examples.keys) == positives
    credit = kernels.auc_credit(examples.keys)
    precision_sum = kernels.precision_sum(examples.keys, positives, size)
    twin = np.ones(size)  # weights of one: the NumPy path, which the kernels never take
    weighted = examples._replace(weights=twin)
    assert credit == (positives, 2 * ranking._auc_credit(weighted)[1])
    assert precision_sum == pytest.approx(ranking._precision_sum(weighted, counts, ranking._Counts(0, 0)), rel=1e-13)
    if 0 < positives < size:
        assert credit[1] / (2 * positives * (size - positives)) == pytest.approx(
            roc_auc_score(is_positive, scores.astype(dtype)), rel=1e-13
        )
        assert precision_sum / positives == pytest.approx(
            average_precision_score(is_positive, scores.astype(dtype)), rel=1e-13
        )


@needs_kernels
def test_a_precision_sum_counts_the_examples_above_its_range():
    # The top of a range holds the positives and examples of the ranges above it.
    keys = ranking.sort(ranking.labeled(np.array([0.1, 0.2, 0.2, 0.4], np.float32), np.array([1, 0, 1, 1]))).keys
    # Above: 5 examples, 2 of them positive. Positives at 0.4: 3/6; at 0.2: 4/8; at 0.1: 5/9.
    assert kernels.precision_sum(keys, 2 + 3, 5 + 4) == pytest.approx(3 / 6 + 4 / 8 + 5 / 9, rel=1e-15)


@needs_kernels
@pytest.mark.parametrize(
    ("keys", "error"),
    [
        (np.zeros(4, np.float32), TypeError),
        (np.zeros(4, np.uint32), TypeError),
        (np.zeros(4, np.int16), TypeError),
        (np.zeros((2, 2), np.int32), TypeError),
        (np.zeros(8, np.int32)[::2], ValueError),  # NumPy's words: not C-contiguous
        ([1, 2, 3], TypeError),
    ],
)
def test_anything_but_contiguous_int32_or_int64_keys_is_refused(keys, error):
    with pytest.raises(error):
        kernels.sort(keys)
    with pytest.raises(error):
        kernels.auc_credit(keys)


@needs_kernels
def test_read_only_keys_are_counted_but_not_sorted():
    keys = np.arange(4, dtype=np.int32)
    keys.flags.writeable = False
    assert kernels.count_positives(keys) == 2
    with pytest.raises(ValueError, match="read-only"):
        kernels.sort(keys)


@needs_kernels
def test_sort_works_in_the_scratch_given_and_refuses_one_of_another_size():
    keys = np.random.default_rng(5).integers(-1000, 1000, 5000).astype(np.int32)
    expected = np.sort(keys)
    kernels.sort(keys, np.empty_like(keys))
    np.testing.assert_array_equal(keys, expected)
    with pytest.raises(ValueError, match="scratch"):
        kernels.sort(keys, np.empty(4999, np.int32))
    with pytest.raises(ValueError, match="scratch"):
        kernels.sort(keys, np.empty(5000, np.int64))


@needs_kernels
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bounds", [[], [0], [-50, 0, 50], [7, 7, 8]])
def test_keys_are_split_into_parts_at_the_bounds_in_their_order(dtype, bounds):
    rng = np.random.default_rng(len(bounds))
    chunks = [rng.integers(-100, 100, size).astype(dtype) for size in (0, 1, 300, 1000)]
    bounds = np.array(bounds, np.int64)
    counts = np.zeros(len(bounds) + 1, np.int64)
    for chunk in chunks:
        kernels.count_parts(chunk, bounds, counts)
    everything = np.concatenate(chunks)
    part_of = np.searchsorted(bounds, everything, "right")  # the number of bounds at or below each key
    np.testing.assert_array_equal(counts, np.bincount(part_of, minlength=len(bounds) + 1))

    ends = np.cumsum(counts)
    offsets = ends - counts
    out = np.empty(len(everything), dtype)
    for chunk in chunks:
        kernels.split_parts(chunk, bounds, out, offsets, ends)
    np.testing.assert_array_equal(offsets, ends)
    starts = ends - counts
    for part, (start, end) in enumerate(zip(starts, ends)):
        np.testing.assert_array_equal(out[start:end], everything[part_of == part])  # stable


@needs_kernels
def test_a_split_never_writes_past_a_parts_room():
    keys = np.array([1, 5, 2, 6, 3], np.int32)
    bounds = np.array([4], np.int64)
    out = np.full(5, -1, np.int32)
    with pytest.raises(ValueError, match="no room"):
        kernels.split_parts(keys, bounds, out, np.array([0, 2], np.int64), np.array([2, 5], np.int64))
    assert out[2] == 5 and out[3] == 6 and out[1] == 2  # part 0 stopped at its end; nothing past it
    with pytest.raises(ValueError, match="no room"):  # room beyond the array
        kernels.split_parts(keys, bounds, out, np.array([0, 3], np.int64), np.array([3, 6], np.int64))
    with pytest.raises(ValueError, match="another type"):
        kernels.split_parts(keys, bounds, out.astype(np.int64), np.array([0, 3], np.int64), np.array([3, 5], np.int64))
    with pytest.raises(ValueError, match="offsets"):
        kernels.split_parts(keys, bounds, out, np.array([0], np.int64), np.array([3, 5], np.int64))
    with pytest.raises(ValueError, match="^bounds must be an int64 array$"):
        kernels.count_parts(keys, bounds.astype(np.int32), np.zeros(2, np.int64))


@needs_kernels
@pytest.mark.parametrize("extreme", [None, 2.0, -2.0, np.inf, -np.inf, 1e10])
def test_label_keys_are_numpys_labeled_keys_and_refuse_scores_without_a_free_bit(monkeypatch, extreme):
    rng = np.random.default_rng(5)
    below_two = np.nextafter(np.float32(2), np.float32(0))  # the largest key with a bit free
    edges = [0.0, -0.0, 1e-45, -1e-45, 1e-30, below_two, -below_two, 1.0, -1.0]
    scores = np.concatenate([rng.uniform(-1.99, 1.99, 5000), edges]).astype(np.float32)
    if extreme is not None:
        scores[1234] = extreme
    is_positive = rng.random(len(scores)) < 0.3
    keys = np.empty(len(scores), np.int32)
    fits = kernels.label_keys(scores, is_positive, keys)
    monkeypatch.setattr(ranking, "kernels", None)
    expected = ranking.labeled(scores, is_positive)
    assert fits == (expected.labels is None) == (extreme is None)
    if fits:
        np.testing.assert_array_equal(keys, expected.keys)


@needs_kernels
def test_append_batch_tells_a_full_chunk_apart_and_writes_nothing_there():
    chunk_scores, chunk_labels = np.zeros(1000, np.float32), np.zeros(1000, bool)
    labels, scores = np.ones(300, np.int64), np.full(300, 0.5, np.float32)
    assert kernels.append_batch(labels, scores, chunk_scores, chunk_labels, 600) == 0
    assert kernels.append_batch(labels, scores, chunk_scores, chunk_labels, 900) == 4  # no room
    assert kernels.append_batch(labels, scores.astype(np.float64), chunk_scores, chunk_labels, 0) == 3  # other type
    assert np.count_nonzero(chunk_labels) == 300 and np.count_nonzero(chunk_scores) == 300


KEY_BATCH_LABEL_DTYPES = [bool, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
KEY_BATCH_LABEL_DTYPES += [np.float32, np.float64]


@needs_kernels
@pytest.mark.parametrize("label_dtype", KEY_BATCH_LABEL_DTYPES)
@pytest.mark.parametrize("size", [0, 1, 7, 1024, 3001])
def test_key_batch_writes_numpys_labeled_keys_for_every_label_type(monkeypatch, label_dtype, size):
    rng = np.random.default_rng(size)
    below_two = np.nextafter(np.float32(2), np.float32(0))
    scores = rng.uniform(-1.99, 1.99, size).astype(np.float32)
    scores[: min(size, 4)] = [0.0, -0.0, below_two, -below_two][: min(size, 4)]
    is_positive = rng.random(size) < 0.4
    keys = np.full(size + 20, -7, np.int32)
    assert kernels.key_batch(is_positive.astype(label_dtype), scores, keys, 10) == 0
    monkeypatch.setattr(ranking, "kernels", None)
    expected = ranking.labeled(scores, is_positive)
    assert expected.labels is None
    np.testing.assert_array_equal(keys[10 : 10 + size], expected.keys)
    assert (keys[:10] == -7).all() and (keys[10 + size :] == -7).all()  # nothing outside the batch's place


@needs_kernels
@pytest.mark.parametrize("label_dtype", KEY_BATCH_LABEL_DTYPES)
def test_key_batch_refuses_labels_nan_and_scores_without_a_free_bit(label_dtype):
    rng = np.random.default_rng(1)
    labels, scores = (rng.random(1000) < 0.5).astype(label_dtype), rng.random(1000, dtype=np.float32)
    keys = np.empty(1000, np.int32)
    for position in (0, 517, 999):  # the vectorized loop's body and its tail
        for bad_score, status in ((np.nan, 2), (-np.nan, 2), (np.inf, 5), (-np.inf, 5), (2.0, 5), (-2.5, 5)):
            bad = scores.copy()
            bad[position] = bad_score
            assert kernels.key_batch(labels, bad, keys, 0) == status, (position, bad_score)
        if label_dtype is not bool:
            for bad_label in {"f": [2, 0.5, -1], "i": [2, -1], "u": [2, 255]}[np.dtype(label_dtype).kind]:
                bad = labels.copy()
                bad[position] = bad_label
                assert kernels.key_batch(bad, scores, keys, 0) == 1, (position, bad_label)
    both = scores.copy()
    both[3] = np.nan
    if label_dtype is not bool:
        wrong = labels.copy()
        wrong[5] = 3
        assert kernels.key_batch(wrong, both, keys, 0) == 1  # labels first, as the thorough check words it
    if np.dtype(label_dtype).kind == "f":
        nan_labels = labels.copy()
        nan_labels[9] = np.nan
        assert kernels.key_batch(nan_labels, scores, keys, 0) == 1


@needs_kernels
def test_key_batch_leaves_other_arrays_and_a_full_chunk_to_its_caller():
    labels, scores, keys = np.ones(300, np.int64), np.full(300, 0.5, np.float32), np.zeros(1000, np.int32)
    assert kernels.key_batch(labels, scores, keys, 700) == 0
    assert kernels.key_batch(labels, scores, keys, 701) == 4  # no room
    assert kernels.key_batch(labels, scores.astype(np.float64), keys, 0) == 3  # float64 scores
    assert kernels.key_batch(labels.astype(np.float16), scores, keys, 0) == 3  # a label type it does not read
    assert kernels.key_batch(labels[:299], scores, keys, 0) == 3  # sizes differ
    assert kernels.key_batch(labels, scores, keys.astype(np.int64), 0) == 3  # int64 keys
    assert kernels.key_batch(labels[::2], scores[::2], keys, 0) == 3  # not contiguous
    assert kernels.key_batch(labels, scores, keys, -1) == 3
    assert np.count_nonzero(keys) == 300
    with pytest.raises(TypeError, match="4 arguments"):
        kernels.key_batch(labels, scores, keys)


class _ArraySubclass(np.ndarray):
    pass


@needs_kernels
def test_key_metric_keys_the_usual_dict_and_returns_the_offset_after_it():
    rng = np.random.default_rng(5)
    labels, scores = rng.integers(0, 2, (3, 100)), rng.random((3, 100), dtype=np.float32)
    keys = np.full(1000, -7, np.int32)
    assert kernels.key_metric({"predictions": scores, "labels": labels}, keys, 40) == 340  # every element counts
    expected = np.full(1000, -7, np.int32)
    assert kernels.key_batch(labels, scores, expected, 40) == 0
    np.testing.assert_array_equal(keys, expected)
    assert kernels.key_metric({"labels": labels[:0], "predictions": scores[:0]}, keys, 7) == 7


@needs_kernels
def test_key_metric_returns_minus_key_batchs_status_and_leaves_other_forms_to_its_caller():
    labels, scores, keys = np.ones(300, np.int64), np.full(300, 0.5, np.float32), np.zeros(1000, np.int32)
    bad_labels, nan_scores = np.full(300, 2, np.int64), scores.copy()
    nan_scores[4] = np.nan
    assert kernels.key_metric({"labels": bad_labels, "predictions": scores}, keys, 0) == -1
    assert kernels.key_metric({"labels": labels, "predictions": nan_scores}, keys, 0) == -2
    assert kernels.key_metric({"labels": labels, "predictions": scores}, keys, 701) == -4  # no room
    assert kernels.key_metric({"labels": labels, "predictions": scores + 2}, keys, 0) == -5
    other_forms = [
        {"labels": labels, "predictions": scores, "weights": scores},  # weighted
        {"labels": labels},
        {"label": labels, "predictions": scores},
        {"labels": labels.tolist(), "predictions": scores},
        {"labels": labels, "predictions": scores.view(_ArraySubclass)},  # a subclass may mean other values
        {"labels": labels, "predictions": memoryview(scores)},
        {"labels": labels, "predictions": scores.astype(np.float64)},
        [labels, scores],
        None,
    ]
    keys = np.zeros(1000, np.int32)  # the refused batches above may have written keys
    for metric in other_forms:
        assert kernels.key_metric(metric, keys, 0) == -3, metric
    assert not keys.any()  # nothing was written
    with pytest.raises(TypeError, match="3 arguments"):
        kernels.key_metric({"labels": labels, "predictions": scores}, keys)
