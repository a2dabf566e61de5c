import pickle

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


def test_batches_are_kept_as_copies_that_the_caller_may_overwrite():
    reducer = FunctionReducer(list)
    given = {"labels": np.array([0, 1, 1], dtype=np.int64), "predictions": np.array([0.2, 0.9, 0.4], np.float32)}
    expected = {key: value.copy() for key, value in given.items()}
    (kept,) = reducer.accumulate(given)
    for value in given.values():  # make_metric's arrays share TensorFlow's tensors, which it reuses
        value[:] = 7
    assert sorted(kept) == ["labels", "predictions"]
    for key, value in kept.items():
        assert value.dtype == expected[key].dtype
        np.testing.assert_array_equal(value, expected[key])
        assert not np.shares_memory(value, given[key])


def test_kept_batches_keep_their_structure_shapes_dtypes_and_values(monkeypatch):
    # Small buffers, so that batches fill several of them and one batch outgrows a buffer.
    monkeypatch.setattr("det_estimator.reducers._function_reducer._Arena.BUFFER_BYTES", 64)
    rng = np.random.default_rng(3)
    given = []
    for index in range(40):
        rows = int(rng.integers(0, 12))
        given.append(
            [
                rng.normal(size=(rows, 3)).astype(np.float32),
                rng.integers(-5, 5, size=rows).astype(np.int8),
                rng.random(rows) < 0.5,
                np.float64(index),  # a NumPy scalar
                np.array(index * 2.5),  # a 0-d array
                np.array([f"row {index}"] * 2),  # strings are kept as they are
                np.arange(rows * 2, dtype=np.float32)[::2],  # not contiguous
            ]
        )
    given.append((np.ones(100, np.complex64), np.zeros((2, 50), np.uint16)))  # a tuple larger than a buffer
    reducer = FunctionReducer(list)
    for batch in given:
        state = reducer.accumulate(batch)
    assert len(state) == len(given)
    for kept, original in zip(state, given):
        assert type(kept) is type(original)
        for kept_leaf, original_leaf in zip(kept, original):
            assert type(kept_leaf) is type(original_leaf)
            assert np.shape(kept_leaf) == np.shape(original_leaf) and np.result_type(kept_leaf) == np.result_type(
                original_leaf
            )
            np.testing.assert_array_equal(kept_leaf, original_leaf)


def test_kept_batches_pickle_to_their_own_values_only():
    reducer = FunctionReducer(list)
    for start in range(0, 1000, 10):
        state = reducer.accumulate(np.arange(start, start + 10, dtype=np.float64))
    # Each batch is a view of a buffer of 4 MB: the state sent to other ranks carries only the values.
    assert len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)) < 20_000
    restored = pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    np.testing.assert_array_equal(np.concatenate(restored), np.arange(1000, dtype=np.float64))
