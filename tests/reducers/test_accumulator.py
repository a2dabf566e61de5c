import pickle

import numpy as np
import pytest

from det_estimator.reducers import R2, BinnedRocAuc, MetricReducer, RocAuc
from det_estimator.reducers._accumulator import MetricAccumulator, MetricReductionError


class RunningSum(MetricReducer):
    def __init__(self):
        self.total = 0.0
        self.batches = 0

    def accumulate(self, metric):
        self.total += float(np.sum(metric))
        self.batches += 1
        return self.total, self.batches

    def cross_slot_reduce(self, per_slot_metrics):
        self.seen_states = list(per_slot_metrics)
        return sum(total for total, _ in per_slot_metrics)


class FailsOn(MetricReducer):
    def __init__(self, bad_value):
        self.bad_value = bad_value

    def accumulate(self, metric):
        if self.bad_value in metric:
            raise ValueError(f"cannot take {self.bad_value}")
        return 0

    def cross_slot_reduce(self, per_slot_metrics):
        return 0


def exchange(accumulators: list[MetricAccumulator]):
    """What the allgather does: every rank receives all ranks' bytes and their sizes."""
    encoded = [np.frombuffer(a.encode(), dtype=np.uint8) for a in accumulators]
    return np.concatenate(encoded), np.array([len(e) for e in encoded], dtype=np.int64)


def test_states_of_all_ranks_are_reduced_on_every_rank():
    ranks = [MetricAccumulator(RunningSum(), "total", rank=r) for r in range(3)]
    for rank, accumulator in enumerate(ranks):
        for batch in np.array_split(np.arange(10.0) + 100 * rank, 3):
            accumulator.accumulate(batch)
    all_bytes, sizes = exchange(ranks)
    expected = sum(np.arange(10.0).sum() + 1000 * r for r in range(3))
    assert [a.reduce_encoded(all_bytes, sizes) for a in ranks] == [expected] * 3


def test_a_rank_without_batches_is_left_out_of_per_slot_metrics():
    ranks = [MetricAccumulator(RunningSum(), "total", rank=r) for r in range(2)]
    ranks[0].accumulate(np.array([1.0, 2.0]))
    all_bytes, sizes = exchange(ranks)
    prototype_copy = ranks[0]._reducer
    assert ranks[0].reduce_encoded(all_bytes, sizes) == 3.0
    assert prototype_copy.seen_states == [(3.0, 1)]


def test_an_evaluation_where_no_rank_saw_a_batch_is_a_clear_error():
    ranks = [MetricAccumulator(RunningSum(), "clicks", rank=r) for r in range(2)]
    all_bytes, sizes = exchange(ranks)
    with pytest.raises(MetricReductionError, match=r"Metric 'clicks': no rank evaluated a single batch"):
        ranks[0].reduce_encoded(all_bytes, sizes)


def test_a_reducer_failing_on_one_rank_fails_every_rank_with_its_name_and_error():
    ranks = [MetricAccumulator(FailsOn(bad_value=7), "my_auc", rank=r) for r in range(2)]
    ranks[0].accumulate(np.array([1, 2]))
    ranks[1].accumulate(np.array([7]))
    ranks[1].accumulate(np.array([3]))  # later batches are skipped, not fatal
    all_bytes, sizes = exchange(ranks)
    for accumulator in ranks:
        with pytest.raises(MetricReductionError) as failure:
            accumulator.reduce_encoded(all_bytes, sizes)
        message = str(failure.value)
        assert "Metric 'my_auc'" in message and "FailsOn failed in accumulate on rank 1" in message
        assert "ValueError: cannot take 7" in message


def test_a_failing_cross_slot_reduce_names_the_metric():
    class BadReduce(RunningSum):
        def cross_slot_reduce(self, per_slot_metrics):
            raise ZeroDivisionError("no examples")

    accumulator = MetricAccumulator(BadReduce(), "rate")
    accumulator.accumulate(np.ones(2))
    with pytest.raises(MetricReductionError, match=r"(?s)'rate'.*cross_slot_reduce.*ZeroDivisionError: no examples"):
        accumulator.reduce_local()


@pytest.mark.parametrize(
    "reducer, batch, warning",
    [
        (RocAuc(), {"labels": np.zeros(4), "predictions": np.linspace(0, 1, 4)}, "RocAuc: only negative examples"),
        (BinnedRocAuc(), {"labels": np.ones(4), "predictions": np.linspace(0, 1, 4)}, "BinnedRocAuc: only one class"),
        (R2(), {"labels": np.ones(1), "predictions": np.ones(1)}, "R2: R2 is not well-defined"),
    ],
)
def test_an_undefined_value_warns_with_the_name_of_the_metric(reducer, batch, warning):
    # Two AUCs of one evaluation (of clicks, of conversions) warn alike but for their names.
    for name in ("click_auc", "conversion_auc"):
        accumulator = MetricAccumulator(reducer, name)
        accumulator.accumulate(batch)
        with pytest.warns(RuntimeWarning, match=f"^Metric '{name}': {warning}"):
            assert np.isnan(accumulator.reduce_local())


def test_a_reducer_used_outside_an_accumulator_warns_without_a_metric_name():
    reducer = RocAuc()
    state = reducer.accumulate({"labels": np.zeros(3), "predictions": np.ones(3)})
    with pytest.warns(RuntimeWarning, match="^RocAuc: only negative examples"):
        reducer.cross_slot_reduce([state])


def test_an_unpicklable_state_is_reported_not_hung_on():
    class LambdaState(RunningSum):
        def accumulate(self, metric):
            return lambda: metric

    ranks = [MetricAccumulator(LambdaState(), "odd", rank=r) for r in range(2)]
    for accumulator in ranks:
        accumulator.accumulate(np.ones(1))
    all_bytes, sizes = exchange(ranks)
    with pytest.raises(MetricReductionError, match="pickling the state"):
        ranks[1].reduce_encoded(all_bytes, sizes)


def test_every_evaluation_starts_fresh_and_the_users_instance_is_never_mutated():
    shared = RunningSum()
    accumulator = MetricAccumulator(shared, "total")
    accumulator.accumulate(np.array([5.0]))
    assert accumulator.reduce_local() == 5.0
    accumulator.accumulate(np.array([1.0]))
    assert accumulator.reduce_local() == 1.0  # not 6.0: the second evaluation starts fresh
    assert (shared.total, shared.batches) == (0.0, 0)
    assert pickle.loads(pickle.dumps(shared)).total == 0.0


def test_a_failed_evaluation_does_not_leak_into_the_next():
    accumulator = MetricAccumulator(FailsOn(bad_value=1), "flaky")
    accumulator.accumulate(np.array([1]))
    with pytest.raises(MetricReductionError):
        accumulator.reduce_local()
    accumulator.accumulate(np.array([2]))
    assert accumulator.reduce_local() == 0


class ForgetsToReturn(RunningSum):
    def cross_slot_reduce(self, per_slot_metrics):
        self.seen_states = list(per_slot_metrics)  # and no return statement


def test_a_cross_slot_reduce_returning_none_is_an_error_not_a_nan_metric():
    from det_estimator import _root_cause
    from det_estimator._root_cause import error_record

    _root_cause.forget()
    accumulator = MetricAccumulator(ForgetsToReturn(), "auc", rank=0)
    accumulator.accumulate(np.ones(2))
    try:
        with pytest.raises(
            MetricReductionError, match=r"Metric 'auc': ForgetsToReturn.cross_slot_reduce returned None instead"
        ):
            accumulator.reduce_local(np.dtype(np.float64))
        # What the command shows names the metric, not TensorFlow's wrapper of the py_func.
        record = error_record(RuntimeError("Graph execution error: ..."), rank=0)
        assert record["origin"] == "metric 'auc' (ForgetsToReturn.cross_slot_reduce)"
        assert "returned None" in record["message"]
    finally:
        _root_cause.forget()
    accumulator.accumulate(np.ones(2))
    assert accumulator.reduce_local() is None  # without a dtype the value is handed back as it is


def test_a_reducer_function_returning_none_or_a_dict_is_named_in_the_error():
    from det_estimator import _root_cause
    from det_estimator.reducers._function_reducer import FunctionReducer

    def mean_score(batches):
        np.mean(np.concatenate(batches))

    accumulator = MetricAccumulator(FunctionReducer(mean_score), "mean_score")
    accumulator.accumulate(np.ones(2))
    with pytest.raises(MetricReductionError, match=r"'mean_score': the reducer function mean_score returned None"):
        accumulator.reduce_local(np.dtype(np.float32))
    _root_cause.forget()

    accumulator = MetricAccumulator(FunctionReducer(lambda batches: {"a": 1.0}), "two")
    accumulator.accumulate(np.ones(2))
    with pytest.raises(MetricReductionError, match=r"returned \{'a': 1.0\}, which cannot be converted to float64"):
        accumulator.reduce_local(np.dtype(np.float64))
    _root_cause.forget()


def test_a_reducer_that_cannot_be_deep_copied_is_refused_with_the_reason():
    import threading

    class Locked(RunningSum):
        def __init__(self):
            super().__init__()
            self.lock = threading.Lock()

    with pytest.raises(
        TypeError,
        match=r"copy.deepcopy of the reducer, and Locked cannot be copied: cannot pickle '_thread.lock' object",
    ):
        MetricAccumulator(Locked(), "total")


def test_reducing_the_gathered_bytes_does_not_copy_them():
    # A rank holds the gathered bytes throughout; the reduction adds the states unpickled from them,
    # the sorted keys and the sort's room (12 bytes per example), not another copy of every rank's bytes.
    import tracemalloc

    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    size = 1_000_000
    labels, scores = rng.random(size) < 0.1, rng.random(size, dtype=np.float32)
    ranks = [MetricAccumulator(RocAuc(num_threads=2), name="auc", rank=rank) for rank in range(2)]
    for rank, accumulator in enumerate(ranks):
        accumulator.accumulate({"labels": labels[rank::2], "predictions": scores[rank::2]})
    encoded = [accumulator.encode() for accumulator in ranks]
    all_bytes, sizes = np.frombuffer(b"".join(encoded), np.uint8), np.array([len(each) for each in encoded])
    tracemalloc.start()
    try:
        value = ranks[0].reduce_encoded(all_bytes, sizes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == pytest.approx(roc_auc_score(labels, scores), rel=0, abs=1e-12)
    assert peak < 14 * size
