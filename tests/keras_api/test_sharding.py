"""wrap_data: each process's share of arrays, Sequences and datasets, and predictions put back in input order."""

import numpy as np
import pytest
import tensorflow as tf

from det_estimator.keras._engine._sharding import ShardedSequence, Sharder, in_input_order


def test_one_process_gets_the_data_as_it_is(one_of_many):
    sharder = Sharder(one_of_many(0, 1))
    x, y = np.arange(10.0).reshape(5, 2), np.arange(5)
    wrapped_x, wrapped_y = sharder.wrap(x, y)
    np.testing.assert_array_equal(wrapped_x, x)
    np.testing.assert_array_equal(wrapped_y, y)
    dataset = tf.data.Dataset.range(5)
    assert list(sharder.wrap(dataset).as_numpy_iterator()) == [0, 1, 2, 3, 4]
    sequence = Batches(7, 3)
    assert sharder.wrap(sequence) is sequence


def test_arrays_go_round_robin_by_record_and_together_make_the_whole(one_of_many):
    x = {"a": np.arange(22).reshape(11, 2), "b": np.arange(11)}
    y, w = np.arange(11) * 10, np.ones(11)
    shares = [Sharder(one_of_many(rank, 3)).wrap(x, y, w) for rank in range(3)]
    assert [len(share[1]) for share in shares] == [4, 4, 3]
    for rank, (share_x, share_y, share_w) in enumerate(shares):
        np.testing.assert_array_equal(share_y, y[rank::3])
        np.testing.assert_array_equal(share_x["a"], x["a"][rank::3])
        np.testing.assert_array_equal(share_w, w[rank::3])
    # With a per-process batch of b, step k of the processes together reads records k*G..(k+1)*G-1 (G = 3b).
    b = 1
    step = sorted(int(share[1][k * b]) // 10 for share in shares for k in [2])
    assert step == [6, 7, 8]


def test_the_records_of_each_global_step_are_those_of_one_process_with_the_global_batch(one_of_many):
    records, size, per_process = 48, 2, 4
    y = np.arange(records)
    shares = [Sharder(one_of_many(rank, size)).wrap(y) for rank in range(size)]
    for step in range(records // (size * per_process)):
        together = np.sort(np.concatenate([share[step * per_process : (step + 1) * per_process] for share in shares]))
        np.testing.assert_array_equal(together, y[step * size * per_process : (step + 1) * size * per_process])


def test_a_sequence_goes_round_robin_by_batch(one_of_many):
    sequence = Batches(records=10, batch_size=3)  # batches of 3, 3, 3, 1
    shares = [Sharder(one_of_many(rank, 2)).wrap(sequence) for rank in range(2)]
    assert all(isinstance(share, ShardedSequence) for share in shares)
    assert [len(share) for share in shares] == [2, 2]
    np.testing.assert_array_equal(shares[0][1][0].ravel(), [6, 7, 8])
    np.testing.assert_array_equal(shares[1][1][0].ravel(), [9])
    shares[0].on_epoch_end()
    assert sequence.epochs_ended == 1


def test_a_dataset_is_sharded_by_element(one_of_many):
    shares = [Sharder(one_of_many(rank, 3)).wrap(tf.data.Dataset.range(8)) for rank in range(3)]
    assert [list(share.as_numpy_iterator()) for share in shares] == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_a_dataset_built_from_a_share_is_not_sharded_again(one_of_many):
    sharder = Sharder(one_of_many(1, 2))
    share = sharder.wrap(tf.data.Dataset.range(8))
    with pytest.raises(ValueError, match=r"not yet this process's share.*context.wrap_data\(\)"):
        sharder.wrap(share.map(lambda record: record * 2))
    # The rule is the trial's: on one process nothing is cut, and wrapping twice loses nothing.
    alone = Sharder(one_of_many(0, 1))
    assert list(alone.wrap(alone.wrap(tf.data.Dataset.range(3)).batch(2)).as_numpy_iterator())[0].tolist() == [0, 1]


def test_predictions_on_array_shares_come_back_in_input_order(one_of_many):
    x = np.arange(11, dtype="float32").reshape(11, 1)
    sharders = [Sharder(one_of_many(rank, 3)) for rank in range(3)]
    shares = [sharder.wrap(x) for sharder in sharders]
    predictions = [[share * 2.0, share + 0.5] for share in shares]  # a model with two outputs
    gathered = [([np.asarray(p) for p in prediction], None) for prediction in predictions]
    for rank, sharder in enumerate(sharders):
        share = sharder.share_of(shares[rank])
        assert share is not None and share.unit == "record" and share.total == 11
        whole = in_input_order(predictions[rank], share, one_of_many(rank, 3, gathered))
        np.testing.assert_array_equal(whole[0], x * 2.0)
        np.testing.assert_array_equal(whole[1], x + 0.5)


def test_predictions_on_sequence_shares_come_back_in_input_order(one_of_many):
    sequence = Batches(records=10, batch_size=3)
    shares = [Sharder(one_of_many(rank, 2)).wrap(sequence) for rank in range(2)]
    predictions, sizes = [], []
    for share in shares:
        batches = [share[index][0] for index in range(len(share))]
        predictions.append(np.concatenate(batches) * 3.0)
        sizes.append([share.batch_sizes[index] for index in range(len(share))])
    gathered = [([predictions[rank]], sizes[rank]) for rank in range(2)]
    whole = in_input_order(predictions[0], shares[0].share, one_of_many(0, 2, gathered), sizes[0])
    np.testing.assert_array_equal(whole.ravel(), np.arange(10) * 3.0)


def test_unwrapped_data_has_no_share(one_of_many):
    sharder = Sharder(one_of_many(0, 2))
    sharder.wrap(np.arange(4))
    assert sharder.share_of(np.arange(4)) is None
    assert sharder.share_of(tf.data.Dataset.range(3)) is None
    wrapped = sharder.wrap(tf.data.Dataset.range(6))
    assert sharder.share_of(wrapped.batch(2).map(lambda batch: batch * 2)) is not None


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ((), TypeError, "Received: nothing"),
        ((np.arange(3), np.arange(4)), ValueError, "one record per row"),
        ((np.arange(1),), ValueError, "1 records for 2 processes"),
        ((tf.data.Dataset.range(3), np.arange(3)), TypeError, "alone"),
        ((np.float32(3.0),), ValueError, "scalar"),
    ],
)
def test_wrong_data_is_refused_with_a_message(one_of_many, data, error, match):
    with pytest.raises(error, match=match):
        Sharder(one_of_many(0, 2)).wrap(*data)


class Batches(tf.keras.utils.Sequence):
    """Records 0, 1, ... in batches of ``batch_size`` (the last one smaller)."""

    def __init__(self, records: int, batch_size: int) -> None:
        super().__init__()
        self.records, self.batch_size, self.epochs_ended = records, batch_size, 0

    def __len__(self) -> int:
        return -(-self.records // self.batch_size)

    def __getitem__(self, index: int):
        values = np.arange(index * self.batch_size, min((index + 1) * self.batch_size, self.records))
        return values.reshape(-1, 1).astype("float32"), values

    def on_epoch_end(self) -> None:
        self.epochs_ended += 1
