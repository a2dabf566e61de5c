"""Every built-in reducer, run over several simulated workers, against scikit-learn.

All comparisons go through :func:`reduce_over_workers`: the data is dealt to workers
of uneven sizes (1001 examples, 1, none, then the rest in two uneven parts), each
worker feeds its share batch by batch to its own reducer instance, the final states
travel through pickle as they would over the network, and one more instance reduces
them. The result must equal scikit-learn (or NumPy) on the concatenated data.
"""

import pickle
import warnings
from typing import Any, Callable, Optional

import numpy as np
import pytest
from sklearn import metrics as skm

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

TOLERANCE = {"rel": 1e-12, "abs": 1e-12}


def worker_ranges(n: int) -> list[tuple[int, int]]:
    """Uneven shares of n examples: 1001, 1, 0, then the rest split 1:2."""
    sizes = [1001, 1, 0] if n >= 1002 else [n, 0]
    rest = n - sum(sizes)
    sizes += [rest // 3, rest - rest // 3]
    bounds = np.cumsum([0] + sizes)
    return list(zip(bounds[:-1], bounds[1:]))


def batch_ranges(start: int, stop: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Batches of random sizes 1..97; a worker without examples gets one empty batch."""
    if start == stop:
        return [(start, stop)]
    ranges = []
    while start < stop:
        end = min(stop, start + int(rng.integers(1, 98)))
        ranges.append((start, end))
        start = end
    return ranges


def reduce_over_workers(
    make_reducer: Callable[[], Any],
    columns: dict[str, np.ndarray],
    to_metric: Optional[Callable[[dict[str, np.ndarray]], Any]] = None,
    seed: int = 0,
) -> Any:
    """Accumulates columns (split along axis 0) over simulated workers and reduces them."""
    rng = np.random.default_rng(seed)
    n = len(next(iter(columns.values())))
    states = []
    for start, stop in worker_ranges(n):
        reducer = make_reducer()  # one instance per worker, as on separate processes
        for begin, end in batch_ranges(start, stop, rng):
            batch = {key: column[begin:end] for key, column in columns.items()}
            state = reducer.accumulate(to_metric(batch) if to_metric else batch)
        states.append(pickle.loads(pickle.dumps(state)))
    return make_reducer().cross_slot_reduce(states)


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def binary_scenario(name: str, seed: int = 1) -> dict[str, np.ndarray]:
    """Binary labels with probability scores for one named scenario."""
    rng = np.random.default_rng(seed)
    n = 1 if name == "single" else 3000
    labels = (rng.random(n) < 0.3).astype(np.int64)
    logits = rng.normal(size=n) + 1.2 * labels
    if name == "single":
        labels[:] = 1
    if name == "ties":
        scores = np.round(sigmoid(logits), 1).astype(np.float32)
    elif name == "all_equal":
        scores = np.full(n, 0.5)
    elif name == "saturated":
        # float32 sigmoids saturate to exactly 1.0 from logits of about 17 on.
        logits[::3] = 17 + 10 * rng.random(len(logits[::3]))
        logits[1::7] = -120.0
        scores = sigmoid(logits.astype(np.float32)).astype(np.float32)
        assert np.any(scores == 1.0) and np.any(scores == 0.0)
    else:
        scores = sigmoid(logits)
    columns = {"labels": labels, "predictions": scores}
    if name == "weighted":
        weights = rng.uniform(0.0, 2.0, n)
        weights[rng.random(n) < 0.2] = 0.0
        columns["weights"] = weights
    elif name == "weighted_float32_ties":
        columns["predictions"] = np.round(scores, 2).astype(np.float32)
        columns["weights"] = rng.integers(0, 4, n).astype(np.float32)
    return columns


def weighted(fn):
    def reference(y, p, w):
        return fn(y, p, sample_weight=w)

    return reference


def sk_log_loss(y, p, w):
    return skm.log_loss(y, p, sample_weight=w, labels=[0, 1])


def thresholded(fn, **kwargs):
    def reference(y, p, w):
        return fn(y, (p >= 0.5).astype(np.int64), sample_weight=w, **kwargs)

    return reference


BINARY_CASES = {
    "roc_auc": (RocAuc, weighted(skm.roc_auc_score)),
    "roc_auc_threads": (lambda: RocAuc(num_threads=3), weighted(skm.roc_auc_score)),
    "average_precision": (AveragePrecision, weighted(skm.average_precision_score)),
    # Exact while a worker has fewer distinct scores than cells, as here.
    "binned_roc_auc": (BinnedRocAuc, weighted(skm.roc_auc_score)),
    "accuracy": (Accuracy, thresholded(skm.accuracy_score)),
    "precision": (Precision, thresholded(skm.precision_score, zero_division=0, labels=[0, 1])),
    "recall": (Recall, thresholded(skm.recall_score, zero_division=0, labels=[0, 1])),
    "f1": (F1, thresholded(skm.f1_score, zero_division=0)),
    "f1_macro": (
        lambda: F1(average="macro"),
        thresholded(skm.f1_score, average="macro", zero_division=0, labels=[0, 1]),
    ),
    "precision_micro": (
        lambda: Precision(average="micro"),
        thresholded(skm.precision_score, average="micro", zero_division=0, labels=[0, 1]),
    ),
    "log_loss": (LogLoss, sk_log_loss),
}
SCENARIOS = ["random", "ties", "all_equal", "saturated", "single", "weighted", "weighted_float32_ties"]
RANKING = {"roc_auc", "roc_auc_threads", "average_precision", "binned_roc_auc"}


# ranking_kernels: the exact ranking reducers are checked with their native kernels and without.
@pytest.mark.usefixtures("ranking_kernels")
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("case", sorted(BINARY_CASES))
def test_binary_reducers_match_sklearn(case, scenario):
    if case in RANKING and scenario == "single":
        pytest.skip("a single example has a single class; see test_reducer_errors.py")
    make_reducer, reference = BINARY_CASES[case]
    columns = binary_scenario(scenario)
    with warnings.catch_warnings():
        # sklearn warns on float32 probabilities that do not sum to one at its tolerance.
        warnings.simplefilter("ignore", UserWarning)
        expected = reference(columns["labels"], columns["predictions"], columns.get("weights"))
    result = reduce_over_workers(make_reducer, columns)
    assert isinstance(result, np.float64)
    tolerance = TOLERANCE
    if case == "log_loss" and columns["predictions"].dtype == np.float32:
        # sklearn computes float32 logs; the reducer computes in float64.
        tolerance = {"rel": 1e-6}
    assert result == pytest.approx(expected, **tolerance)


@pytest.mark.usefixtures("ranking_kernels")
@pytest.mark.parametrize("case", sorted(RANKING))
def test_ranking_with_one_class_on_one_worker_only(case):
    make_reducer, reference = BINARY_CASES[case]
    columns = binary_scenario("random", seed=2)
    columns["labels"][:1001] = 0  # the first worker sees negatives only
    columns["labels"][1001] = 1  # the second worker sees one positive only
    result = reduce_over_workers(make_reducer, columns)
    assert result == pytest.approx(reference(columns["labels"], columns["predictions"], None), **TOLERANCE)


def test_binned_roc_auc_with_one_bin_per_distinct_score_is_exact():
    columns = binary_scenario("ties")
    distinct = np.unique(columns["predictions"].astype(np.float64))
    edges = (distinct[1:] + distinct[:-1]) / 2
    result = reduce_over_workers(lambda: BinnedRocAuc(bins=edges), columns)
    assert result == pytest.approx(skm.roc_auc_score(columns["labels"], columns["predictions"]), **TOLERANCE)


def test_log_loss_from_logits_matches_sklearn_on_probabilities():
    rng = np.random.default_rng(3)
    labels = (rng.random(2500) < 0.4).astype(np.int64)
    logits = rng.normal(scale=4.0, size=2500) + labels
    weights = rng.uniform(0, 1, 2500)
    columns = {"labels": labels, "predictions": logits, "weights": weights}
    result = reduce_over_workers(lambda: LogLoss(from_logits=True), columns)
    # sklearn's 1 - sigmoid(x) loses digits for large x, hence the looser tolerance.
    assert result == pytest.approx(sk_log_loss(labels, sigmoid(logits), weights), rel=1e-9)


def multiclass_columns(kind: str, weighted: bool, seed: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, k = 2500, 4
    labels = rng.integers(0, k, n)
    scores = rng.normal(size=(n, k))
    scores[np.arange(n), labels] += 1.0
    scores[:, 3] -= 3.0  # class 3 is rarely predicted
    columns = {"labels": labels, "predictions": scores if kind == "scores" else np.argmax(scores, axis=1)}
    if weighted:
        weights = rng.uniform(0, 3, n)
        weights[::5] = 0.0
        columns["weights"] = weights
    return columns


MULTICLASS_CASES = {
    "accuracy": (lambda: Accuracy(num_classes=4), skm.accuracy_score, {}),
    "precision_macro": (lambda: Precision(num_classes=4), skm.precision_score, {"average": "macro"}),
    "precision_micro": (lambda: Precision(4, average="micro"), skm.precision_score, {"average": "micro"}),
    "recall_macro": (lambda: Recall(num_classes=4), skm.recall_score, {"average": "macro"}),
    "recall_micro": (lambda: Recall(4, average="micro"), skm.recall_score, {"average": "micro"}),
    "f1_macro": (lambda: F1(num_classes=4), skm.f1_score, {"average": "macro"}),
    "f1_micro": (lambda: F1(4, average="micro"), skm.f1_score, {"average": "micro"}),
}


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", ["scores", "class_ids"])
@pytest.mark.parametrize("case", sorted(MULTICLASS_CASES))
def test_multiclass_reducers_match_sklearn(case, kind, weighted):
    make_reducer, reference, kwargs = MULTICLASS_CASES[case]
    columns = multiclass_columns(kind, weighted)
    predicted = columns["predictions"]
    if predicted.ndim == 2:
        predicted = np.argmax(predicted, axis=1)
    if reference is not skm.accuracy_score:
        kwargs = {**kwargs, "labels": [0, 1, 2, 3], "zero_division": 0}
    expected = reference(columns["labels"], predicted, sample_weight=columns.get("weights"), **kwargs)
    assert reduce_over_workers(make_reducer, columns) == pytest.approx(expected, **TOLERANCE)


def test_macro_average_counts_classes_that_never_occur():
    columns = multiclass_columns("class_ids", weighted=False)
    keep = (columns["labels"] != 2) & (columns["predictions"] != 2)
    columns = {key: value[keep] for key, value in columns.items()}
    expected = skm.f1_score(
        columns["labels"], columns["predictions"], labels=[0, 1, 2, 3], average="macro", zero_division=0
    )
    assert reduce_over_workers(lambda: F1(num_classes=4), columns) == pytest.approx(expected, **TOLERANCE)


def regression_columns(name: str, seed: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 1 if name == "single" else 3000
    labels = rng.normal(size=n) * 3 + 1
    predictions = labels + rng.normal(size=n)
    if name == "ties":
        labels, predictions = np.round(labels), np.round(predictions)
    elif name == "large_mean":
        # Sums of squares would cancel catastrophically here.
        labels, predictions = labels + 1e7, predictions + 1e7
    elif name == "float32":
        labels, predictions = labels.astype(np.float32), predictions.astype(np.float32)
    elif name == "multi_output":
        labels, predictions = labels.reshape(-1, 3), predictions.reshape(-1, 3)
    columns = {"labels": labels, "predictions": predictions}
    if name == "weighted":
        weights = rng.uniform(0, 2, n)
        weights[::4] = 0.0
        columns["weights"] = weights
    return columns


REGRESSION_CASES = {
    "mse": (MeanSquaredError, skm.mean_squared_error),
    "mae": (MeanAbsoluteError, skm.mean_absolute_error),
    "r2": (R2, skm.r2_score),
}


@pytest.mark.parametrize("scenario", ["random", "ties", "large_mean", "float32", "multi_output", "weighted", "single"])
@pytest.mark.parametrize("case", sorted(REGRESSION_CASES))
def test_regression_reducers_match_sklearn(case, scenario):
    if case == "r2" and scenario == "single":
        pytest.skip("R2 of a single example is NaN; see test_r2_of_a_single_example_is_nan")
    make_reducer, reference = REGRESSION_CASES[case]
    columns = regression_columns(scenario)
    labels, predictions = (columns[key].reshape(-1).astype(np.float64) for key in ("labels", "predictions"))
    expected = reference(labels, predictions, sample_weight=columns.get("weights"))
    # Worker splits are along the first axis; multi-output rows stay whole.
    result = reduce_over_workers(make_reducer, columns)
    assert result == pytest.approx(expected, **TOLERANCE)


def test_r2_with_constant_labels_follows_sklearn():
    labels = np.full(50, 1.0)
    for predictions in (labels.copy(), labels + 0.5):
        columns = {"labels": labels, "predictions": predictions}
        assert reduce_over_workers(R2, columns) == skm.r2_score(labels, predictions)


def test_r2_of_a_single_example_is_nan():
    with pytest.warns(RuntimeWarning, match="fewer than two examples"):
        result = reduce_over_workers(R2, {"labels": np.array([1.0]), "predictions": np.array([2.0])})
    assert np.isnan(result)


@pytest.mark.parametrize("as_dict", [False, True])
def test_sum_and_mean_match_numpy(as_dict):
    values = np.random.default_rng(6).normal(size=(3000, 3)).astype(np.float32)

    def to_metric(batch):
        return batch if as_dict else batch["values"]

    columns = {"values": values}
    assert reduce_over_workers(Sum, columns, to_metric) == pytest.approx(np.sum(values, dtype=np.float64), **TOLERANCE)
    assert reduce_over_workers(Mean, columns, to_metric) == pytest.approx(
        np.mean(values, dtype=np.float64), **TOLERANCE
    )


def test_weighted_mean_matches_numpy():
    rng = np.random.default_rng(7)
    columns = {"values": rng.normal(size=3000), "weights": rng.uniform(0, 1, 3000)}
    columns["weights"][::3] = 0
    expected = np.average(columns["values"], weights=columns["weights"])
    assert reduce_over_workers(WeightedMean, columns) == pytest.approx(expected, **TOLERANCE)


def test_worker_split_is_uneven_and_covers_everything():
    ranges = worker_ranges(3000)
    assert [stop - start for start, stop in ranges] == [1001, 1, 0, 666, 1332]
    assert ranges[0][0] == 0 and ranges[-1][1] == 3000


@pytest.mark.parametrize("reducer_class", [RocAuc, AveragePrecision])
def test_reducing_a_later_state_beside_empty_ones_leaves_an_earlier_state_its_examples(reducer_class):
    # The later state shares the reducer's chunk with the earlier one (a prefix of it). Reduced
    # beside workers that had no examples, it is the one state with examples: sorting its
    # chunk in place would hand the earlier state the lowest scores of both batches.
    rng = np.random.default_rng(7)
    first, second = [(rng.integers(0, 2, 100), rng.random(100).astype(np.float32)) for _ in range(2)]
    reducer = reducer_class()
    earlier = reducer.accumulate({"labels": first[0], "predictions": first[1]})
    later = reducer.accumulate({"labels": second[0], "predictions": second[1]})
    empty = reducer_class().accumulate({"labels": np.zeros(0), "predictions": np.zeros(0, np.float32)})
    score = skm.roc_auc_score if reducer_class is RocAuc else skm.average_precision_score

    both = reducer.cross_slot_reduce([later, empty, empty])

    assert both == pytest.approx(score(np.r_[first[0], second[0]], np.r_[first[1], second[1]]), **TOLERANCE)
    assert reducer.cross_slot_reduce([earlier]) == pytest.approx(score(*first), **TOLERANCE)
