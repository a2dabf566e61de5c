import numpy as np
import pytest

from det_estimator.reducers._function_reducer import FunctionReducer, merge_in_dataset_order


def batches(records: np.ndarray, batch_size: int):
    return [records[start : start + batch_size] for start in range(0, len(records), batch_size)]


def sharded_batches(records: np.ndarray, num_ranks: int, global_batch_size: int):
    """What each rank sees after a round-robin shard and a per-slot batch."""
    return [batches(records[rank::num_ranks], global_batch_size // num_ranks) for rank in range(num_ranks)]


@pytest.mark.parametrize(("num_records", "num_ranks", "global_batch_size"), [(1001, 2, 16), (1001, 3, 15), (7, 2, 4)])
def test_round_robin_shards_merge_back_into_the_single_process_batches(num_records, num_ranks, global_batch_size):
    records = np.random.default_rng(0).normal(size=(num_records, 3))
    merged = merge_in_dataset_order(sharded_batches(records, num_ranks, global_batch_size))
    expected = batches(records, global_batch_size)
    assert len(merged) == len(expected)
    for got, want in zip(merged, expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("structure", ["dict", "list"])
def test_structured_values_merge_leaf_by_leaf(structure):
    records = np.arange(50)

    def as_value(batch):
        return {"a": batch, "b": -batch} if structure == "dict" else [batch, -batch]

    per_rank = [[as_value(batch) for batch in rank_batches] for rank_batches in sharded_batches(records, 2, 10)]
    merged = merge_in_dataset_order(per_rank)
    expected = [as_value(batch) for batch in batches(records, 10)]
    assert len(merged) == len(expected)
    for got, want in zip(merged, expected):
        keys = ["a", "b"] if structure == "dict" else [0, 1]
        assert type(got) is type(want)
        for key in keys:
            np.testing.assert_array_equal(got[key], want[key])


def test_scalar_values_are_interleaved_batch_by_batch():
    per_rank = [[np.float32(0), np.float32(2), np.float32(4)], [np.float32(1), np.float32(3)]]
    assert merge_in_dataset_order(per_rank) == [0, 1, 2, 3, 4]


def test_batches_that_are_not_a_round_robin_split_stay_separate():
    first, second = np.arange(3), np.arange(10, 20)
    merged = merge_in_dataset_order([[first], [second]])
    assert len(merged) == 2
    np.testing.assert_array_equal(merged[0], first)
    np.testing.assert_array_equal(merged[1], second)


def test_ranks_without_batches_contribute_nothing():
    only = np.arange(4)
    merged = merge_in_dataset_order([[only], []])
    assert len(merged) == 1
    np.testing.assert_array_equal(merged[0], only)


def test_function_reducer_gives_the_one_process_result_on_three_ranks():
    records = np.random.default_rng(1).normal(size=1001)

    def position_weighted_sum(all_batches):
        values = np.concatenate(all_batches)
        return float(np.sum(values * np.arange(len(values))))

    one_process = FunctionReducer(position_weighted_sum)
    for batch in batches(records, 15):
        state = one_process.accumulate(batch)
    expected = one_process.cross_slot_reduce([state])

    states = []
    for rank_batches in sharded_batches(records, 3, 15):
        reducer = FunctionReducer(position_weighted_sum)
        for batch in rank_batches:
            state = reducer.accumulate(batch)
        states.append(state)
    assert FunctionReducer(position_weighted_sum).cross_slot_reduce(states) == expected
