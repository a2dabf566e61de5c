"""Invalid inputs, degenerate evaluations and reset() of the built-in reducers."""

import numpy as np
import pytest

from det_estimator.reducers import (
    F1,
    R2,
    Accuracy,
    AveragePrecision,
    BinnedRocAuc,
    LogLoss,
    Mean,
    MeanAbsoluteError,
    MeanSquaredError,
    Precision,
    Recall,
    RocAuc,
    Sum,
    WeightedMean,
)

LABELED = [
    RocAuc,
    AveragePrecision,
    BinnedRocAuc,
    Accuracy,
    Precision,
    Recall,
    F1,
    LogLoss,
    MeanSquaredError,
    MeanAbsoluteError,
    R2,
]
ALL = [*LABELED, Sum, Mean, WeightedMean]


def labeled_batch(n=10, seed=0, **overrides):
    rng = np.random.default_rng(seed)
    batch = {
        "labels": np.arange(n) % 2,
        "predictions": rng.random(n),
        "weights": rng.uniform(0.5, 1.5, n),
    }
    batch.update(overrides)
    return batch


def sample_batch(reducer_type, seed=0):
    """A valid batch in the input format of reducer_type."""
    if reducer_type in (Sum, Mean):
        return np.random.default_rng(seed).random(10)
    if reducer_type is WeightedMean:
        rng = np.random.default_rng(seed)
        return {"values": rng.random(10), "weights": rng.random(10)}
    return labeled_batch(seed=seed)


@pytest.mark.parametrize("key", ["predictions", "labels", "weights"])
@pytest.mark.parametrize("reducer_type", LABELED)
def test_nan_inputs_name_reducer_key_and_count(reducer_type, key):
    batch = labeled_batch()
    batch[key] = batch[key].astype(np.float64)
    batch[key][[1, 4, 7]] = np.nan
    with pytest.raises(ValueError, match=rf"{reducer_type.__name__}: `{key}` contains 3 NaN value\(s\) out of 10"):
        reducer_type().accumulate(batch)


@pytest.mark.parametrize("reducer_type", [Sum, Mean])
def test_nan_values_are_rejected_by_aggregations(reducer_type):
    with pytest.raises(ValueError, match=rf"{reducer_type.__name__}: `values` contains 1 NaN"):
        reducer_type().accumulate(np.array([1.0, np.nan]))


def test_nan_values_are_rejected_by_weighted_mean():
    with pytest.raises(ValueError, match=r"WeightedMean: `values` contains 2 NaN"):
        WeightedMean().accumulate({"values": [np.nan, np.nan, 1.0], "weights": [1, 1, 1]})


@pytest.mark.parametrize("reducer_type", [MeanSquaredError, MeanAbsoluteError, R2, LogLoss])
def test_infinite_predictions_are_rejected_where_meaningless(reducer_type):
    batch = labeled_batch(predictions=np.array([np.inf] + [0.5] * 9))
    with pytest.raises(ValueError, match=r"`predictions` contains 1 infinite value"):
        reducer_type().accumulate(batch)


@pytest.mark.parametrize("reducer_type", [RocAuc, AveragePrecision, Accuracy])
def test_infinite_scores_are_ranked(reducer_type):
    batch = labeled_batch(predictions=np.array([-np.inf, np.inf] * 5), weights=np.ones(10))
    reducer = reducer_type()
    assert reducer.cross_slot_reduce([reducer.accumulate(batch)]) == 1.0


@pytest.mark.parametrize("reducer_type", LABELED)
def test_shape_mismatch_reports_both_shapes(reducer_type):
    batch = labeled_batch(predictions=np.full((3, 5), 0.5))
    with pytest.raises(ValueError, match=r"`predictions` has shape \(3, 5\) \(15 elements\).*shape \(10,\)"):
        reducer_type().accumulate(batch)


@pytest.mark.parametrize("reducer_type", LABELED)
def test_weights_of_another_size_are_rejected(reducer_type):
    with pytest.raises(ValueError, match=r"`weights` has shape \(9,\)"):
        reducer_type().accumulate(labeled_batch(weights=np.ones(9)))


@pytest.mark.parametrize("reducer_type", [*LABELED, WeightedMean])
def test_negative_weights_are_rejected(reducer_type):
    batch = sample_batch(reducer_type)
    batch["weights"] = -np.ones(10)
    with pytest.raises(ValueError, match=r"`weights` contains 10 negative value"):
        reducer_type().accumulate(batch)


@pytest.mark.parametrize("reducer_type", LABELED)
def test_misspelled_keys_are_rejected(reducer_type):
    batch = labeled_batch()
    batch["weight"] = batch.pop("weights")
    with pytest.raises(ValueError, match=r"unexpected key\(s\) \['weight'\]"):
        reducer_type().accumulate(batch)


@pytest.mark.parametrize("reducer_type", [Sum, Mean])
def test_unweighted_aggregations_reject_weights(reducer_type):
    with pytest.raises(ValueError, match="use WeightedMean"):
        reducer_type().accumulate({"values": [1.0], "weights": [2.0]})


@pytest.mark.parametrize("reducer_type", [RocAuc, AveragePrecision, BinnedRocAuc, LogLoss])
def test_non_binary_labels_are_rejected(reducer_type):
    with pytest.raises(ValueError, match=r"`labels` must be binary.*\[-1, 2\]"):
        reducer_type().accumulate(labeled_batch(labels=np.array([0, 1, -1, 2, 1, 0, 0, 1, 1, 0])))


def test_probabilities_outside_unit_interval_are_rejected():
    for reducer in (LogLoss(), BinnedRocAuc()):
        with pytest.raises(ValueError, match=r"probabilities in \[0, 1\]; 1 value"):
            reducer.accumulate(labeled_batch(predictions=np.array([1.5] + [0.5] * 9)))


def test_invalid_class_ids_are_rejected():
    with pytest.raises(ValueError, match=r"`labels` must be class ids.*\[0, 3\)"):
        Accuracy(num_classes=3).accumulate({"labels": [0, 3], "predictions": [0, 1]})
    with pytest.raises(ValueError, match=r"`predictions` must be class ids"):
        F1(num_classes=3).accumulate({"labels": [0, 1], "predictions": [0.5, 1.0]})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: BinnedRocAuc(bins=2), r"Argument `bins` must be an integer >= 3.*Received: bins=2"),
        (lambda: BinnedRocAuc(bins=[0.0, 0.5, 0.5]), r"Argument `bins` must be .*strictly increasing"),
        (lambda: BinnedRocAuc(bins=[[0.0, 1.0]]), r"Argument `bins` must be"),
        (lambda: BinnedRocAuc(scores="odds"), r"Argument `scores` must be one of.*Received: scores='odds'"),
        (lambda: RocAuc(num_threads=0), r"Argument `num_threads` must be None or a positive integer"),
        (lambda: Precision(num_classes=1), r"Argument `num_classes` must be an integer >= 2"),
        (lambda: Recall(average="weighted"), r"Argument `average` must be None or one of"),
        (lambda: F1(num_classes=3, average="binary"), r"Argument `average` must be 'micro' or 'macro'"),
        (lambda: Accuracy(threshold=float("nan")), r"Argument `threshold` must be a finite number"),
        (lambda: LogLoss(from_logits="yes"), r"Argument `from_logits` must be a bool"),
    ],
)
def test_invalid_constructor_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("reducer_type", ALL)
def test_no_states_means_no_examples(reducer_type):
    with pytest.raises(ValueError, match="no examples"):
        reducer_type().cross_slot_reduce([])


@pytest.mark.parametrize("reducer_type", ALL)
def test_only_empty_states_means_no_examples(reducer_type):
    reducer = reducer_type()
    if reducer_type in (Sum, Mean):
        state = reducer.accumulate(np.zeros(0))
    elif reducer_type is WeightedMean:
        state = reducer.accumulate({"values": np.zeros(0), "weights": np.zeros(0)})
    else:
        state = reducer.accumulate({"labels": np.zeros(0), "predictions": np.zeros(0)})
    with pytest.raises(ValueError, match="no examples"):
        reducer.cross_slot_reduce([state, state, None])


@pytest.mark.parametrize("reducer_type", [*LABELED, WeightedMean])
def test_examples_of_weight_zero_are_no_examples(reducer_type):
    reducer = reducer_type()
    batch = sample_batch(reducer_type)
    batch["weights"] = np.zeros(10)
    with pytest.raises(ValueError, match="no examples"):
        reducer.cross_slot_reduce([reducer.accumulate(batch)])


@pytest.mark.parametrize("reducer_type", [RocAuc, AveragePrecision, BinnedRocAuc])
@pytest.mark.parametrize("label", [0, 1])
def test_one_class_gives_nan_and_warns(reducer_type, label):
    reducer = reducer_type()
    state = reducer.accumulate({"labels": np.full(5, label), "predictions": np.linspace(0, 1, 5)})
    with pytest.warns(RuntimeWarning, match="only .* the whole evaluation"):
        result = reducer.cross_slot_reduce([state])
    assert np.isnan(result)


def test_one_class_after_dropping_zero_weights_gives_nan():
    reducer = RocAuc()
    state = reducer.accumulate({"labels": [0, 1, 1], "predictions": [0.1, 0.2, 0.3], "weights": [0, 1, 1]})
    with pytest.warns(RuntimeWarning, match="only positive examples"):
        assert np.isnan(reducer.cross_slot_reduce([state]))


def test_states_of_another_reducer_are_rejected():
    state = Accuracy().accumulate(labeled_batch())
    with pytest.raises(TypeError, match="expected states of type ScoreSamples"):
        RocAuc().cross_slot_reduce([state])
    with pytest.raises(ValueError, match=r"expected \(2, 2\) confusion matrices"):
        Accuracy().cross_slot_reduce([np.zeros((3, 3))])


@pytest.mark.parametrize("reducer_type", ALL)
def test_reset_clears_state(reducer_type):
    reducer = reducer_type()
    reducer.accumulate(sample_batch(reducer_type, seed=1))
    reducer.reset()
    state = reducer.accumulate(sample_batch(reducer_type, seed=2))
    fresh = reducer_type()
    expected = fresh.cross_slot_reduce([fresh.accumulate(sample_batch(reducer_type, seed=2))])
    assert reducer.cross_slot_reduce([state]) == expected


def test_reset_keeps_earlier_states_valid():
    reducer = RocAuc()
    state = reducer.accumulate({"labels": [0, 1], "predictions": [0.2, 0.8]})
    reducer.reset()
    reducer.accumulate({"labels": [0, 1], "predictions": [0.8, 0.2]})
    assert reducer.cross_slot_reduce([state]) == 1.0


def test_none_states_are_skipped():
    reducer = Mean()
    assert reducer.cross_slot_reduce([None, reducer.accumulate([1.0, 3.0])]) == 2.0
