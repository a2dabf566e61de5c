"""The five kinds of input: which batches each process reads, in which order, and from where a resume starts."""

import itertools
import logging
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from det_estimator.config import load_experiment_config
from det_estimator.keras import SequenceAdapter, TFKerasTrialContext
from det_estimator.keras._engine._inputs import DataError, training_data, validation_data
from det_estimator.keras._engine._sequences import BatchReader, Placement
from det_estimator.keras._engine._sharding import ArrayData, sequence_plan

RECORDS = 10
X = np.arange(RECORDS, dtype=np.float32)[:, None]
Y = np.arange(RECORDS, dtype=np.int64)


def context(tmp_path, rank=0, size=1, global_batch_size=4, **fit):
    raw = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": global_batch_size},
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 10}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)},
        "resources": {"slots_per_trial": size},
    }
    distributed = SimpleNamespace(rank=rank, size=size, local_rank=rank)
    trial_context = TFKerasTrialContext(
        load_experiment_config(raw), {"global_batch_size": global_batch_size}, 7, distributed
    )
    trial_context.configure_fit(**fit)
    return trial_context


def labels(dataset, batches):
    return [batch[1].numpy().tolist() for batch in itertools.islice(dataset, batches)]


class Rows(tf.keras.utils.Sequence):
    """Batch i holds labels [10 i, 10 i + 1]; counts on_epoch_end and the threads that read it."""

    def __init__(self, batches):
        self.batches, self.epoch_ends, self.threads = batches, 0, set()

    def __len__(self):
        return self.batches

    def __getitem__(self, index):
        self.threads.add(threading.current_thread().name)
        return np.full((2, 1), index, np.float32), np.array([10 * index, 10 * index + 1])

    def on_epoch_end(self):
        self.epoch_ends += 1


def test_array_batches_give_each_process_its_part_of_every_global_batch_epoch_after_epoch():
    arrays = ArrayData((X, Y), "loader")
    rank0, rank1 = (labels(arrays.training(2, rank, 2, 0, None), 4) for rank in (0, 1))
    assert rank0 == [[0, 1], [4, 5], [8, 9], [2, 3]]  # 5 batches per epoch: the third step spans two epochs
    assert rank1 == [[2, 3], [6, 7], [0, 1], [4, 5]]
    assert labels(arrays.training(4, 0, 1, 0, None), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [0, 1, 2, 3]]


@pytest.mark.parametrize("shuffle_seed", [None, 3])
def test_array_batches_resume_at_any_position_with_the_batches_that_would_have_followed(shuffle_seed):
    arrays = ArrayData((X, Y), "loader")
    straight = labels(arrays.training(3, 1, 2, 0, shuffle_seed), 12)
    for position in (2, 6, 10):  # batches of the global stream read by both processes before
        assert labels(arrays.training(3, 1, 2, position, shuffle_seed), 12 - position // 2) == straight[position // 2 :]


def test_shuffled_array_epochs_hold_every_record_once_in_an_order_of_their_own():
    arrays = ArrayData((X, Y), "loader")
    epochs = labels(arrays.training(5, 0, 1, 0, shuffle_seed=3), 6)
    orders = [epochs[i] + epochs[i + 1] for i in (0, 2, 4)]
    assert all(sorted(order) == list(range(RECORDS)) for order in orders)
    assert len({tuple(order) for order in orders}) == 3
    assert labels(arrays.training(5, 0, 1, 0, shuffle_seed=4), 2) != epochs[:2]


def test_arrays_keep_the_structure_of_several_inputs_and_sample_weights():
    weights = np.linspace(0, 1, RECORDS)
    arrays = ArrayData(({"a": X, "b": X * 2}, Y, weights), "loader")
    x, y, w = next(iter(arrays.validation(4, 0, 1)))
    assert sorted(x) == ["a", "b"] and x["b"].numpy().ravel().tolist() == [0, 2, 4, 6]
    assert w.dtype == tf.float32 and w.numpy().tolist() == pytest.approx(weights[:4].tolist())
    (first, second), _ = next(iter(ArrayData(([X, X], Y), "loader").validation(4, 0, 1)))  # a list: a tuple
    assert first.shape == second.shape == (4, 1)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ((X,), r"must return \(x, y\) or \(x, y, sample_weights\)"),
        ((X, Y[:5]), "must all have one record per row"),
        ((X[:0], Y[:0]), "hold no record"),
    ],
)
def test_unusable_arrays_are_refused_with_what_was_received(data, message):
    with pytest.raises(ValueError, match=message) as raised:
        ArrayData(data, "build_training_data_loader()")
    assert isinstance(raised.value, DataError)  # det-estimator's own: shown as its message alone


def test_array_validation_shares_cover_every_record_once():
    arrays = ArrayData((X, Y), "loader")
    shares = [sum(labels(arrays.validation(3, rank, 2), 10), []) for rank in (0, 1)]
    assert shares == [[0, 1, 2, 6, 7, 8], [3, 4, 5, 9]]


def test_a_sequence_plan_shares_every_epoch_even_with_fewer_batches_than_processes():
    plans = [list(itertools.islice(sequence_plan(3, rank, 2, None), 3)) for rank in (0, 1)]
    assert plans[0] == [Placement(0, 0), Placement(0, 2), Placement(1, 1)]
    assert plans[1] == [Placement(0, 1), Placement(1, 0), Placement(1, 2)]
    single = list(itertools.islice(sequence_plan(1, 1, 2, None), 2))
    assert single == [Placement(1, 0), Placement(3, 0)]
    shuffled = [p.index for p in itertools.islice(sequence_plan(4, 0, 1, 5), 8)]
    assert sorted(shuffled[:4]) == sorted(shuffled[4:]) == [0, 1, 2, 3] and shuffled[:4] != shuffled[4:]


@pytest.mark.parametrize(
    ("workers", "use_multiprocessing"), [(0, False), (2, False), (2, True)], ids=["inline", "threads", "processes"]
)
def test_a_sequence_is_read_in_order_whoever_reads_it_with_on_epoch_end_between_epochs(workers, use_multiprocessing):
    sequence = Rows(3)
    reader = BatchReader(sequence, workers, use_multiprocessing, max_queue_size=2)
    plan = [Placement(epoch, index) for epoch in (1, 2, 4) for index in (2, 0)]
    batches = [batch[1].tolist() for batch in reader.read(plan, epoch=1)]
    reader.close()
    assert batches == [[20, 21], [0, 1]] * 3
    assert sequence.epoch_ends == 3  # from epoch 1 to 2, then 2 to 4
    readers = {"inline": {"MainThread"}, "threads": {"det-sequence_0", "det-sequence_1"}, "processes": set()}
    expected = readers["processes" if use_multiprocessing else "threads" if workers else "inline"]
    assert sequence.threads <= expected and (sequence.threads or not expected)  # processes read their own copies


def test_a_training_sequence_resumes_in_the_epoch_state_it_had(tmp_path):
    sequence = Rows(3)
    data = training_data(SequenceAdapter(sequence, workers=0), context(tmp_path, rank=1, size=2, shuffle=False))
    iterator = data.start(position=4, batches=2, saved=None, size=2)
    assert sequence.epoch_ends == 1  # replayed: the resume is in the second epoch
    # Global batches 4 + 1, 4 + 3, ...: the second epoch's index 2, then the third epoch's 1.
    assert [next(iterator)[1].numpy().tolist() for _ in range(2)] == [[20, 21], [10, 11]]
    assert sequence.epoch_ends >= 2  # and once more when reading reached the third (reading runs ahead)
    data.close()


def test_a_sequence_validation_share_is_one_pass_then_on_epoch_end(tmp_path):
    sequence = Rows(5)
    data = validation_data(sequence, context(tmp_path, rank=1, size=2))
    data.reset_count()
    assert [batch[1].numpy().tolist() for batch in data.dataset] == [[10, 11], [30, 31]]
    assert sequence.epoch_ends == 1 and data.examples == 4
    data.close()


def test_a_tf_data_training_iterator_resumes_from_its_saved_state(tmp_path):
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(RECORDS, seed=1).batch(3)
    data = training_data(dataset, context(tmp_path))
    iterator = data.start(0, 0, None, 1)
    for _ in range(5):  # into the second epoch, mid-shuffle
        next(iterator)
    data.save(iterator, tmp_path)
    expected = labels(iterator, 6)
    resumed = training_data(dataset, context(tmp_path)).start(0, 5, (tmp_path, 1), 1)
    assert labels(resumed, 6) == expected


def test_a_tf_data_training_dataset_without_a_saved_position_skips_what_was_trained(tmp_path, caplog):
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(3)
    with caplog.at_level(logging.WARNING, logger="det_estimator.keras"):
        iterator = training_data(dataset, context(tmp_path)).start(0, 5, (tmp_path, 2), 1)
    assert labels(iterator, 2) == [[3, 4, 5], [6, 7, 8]]  # 4 batches per epoch: the 6th is the 2nd
    assert "written by another number of processes" in caplog.text


def test_the_position_of_a_distributed_iterator_is_not_saved_and_the_warning_says_why(tmp_path, caplog):
    # As under a MultiWorkerMirroredStrategy of several workers, whose iterator TensorFlow cannot checkpoint.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(3)
    data = training_data(dataset, context(tmp_path))
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset))
    next(iterator)
    with caplog.at_level(logging.WARNING, logger="det_estimator.keras"):
        data.save(iterator, tmp_path)
        data.save(iterator, tmp_path)
    assert caplog.text.count("a tf.distribute strategy's distributed iterator, whose state TensorFlow cannot") == 1
    assert "reshuffled each epoch then draws the later epochs' orders afresh" in caplog.text
    assert not list(tmp_path.glob("**/rank0.index"))
    resumed = training_data(dataset, context(tmp_path)).start(0, 1, (tmp_path, 1), 1)
    assert labels(resumed, 1) == [[3, 4, 5]]  # the batch after the one trained, by skipping


def test_a_tf_data_pipeline_on_several_processes_must_come_from_wrap_dataset(tmp_path):
    trial_context = context(tmp_path, rank=0, size=2)
    with pytest.raises(DataError, match=r"never passed to context.wrap_dataset\(\). With 2 processes"):
        training_data(tf.data.Dataset.from_tensor_slices((X, Y)).batch(2), trial_context)
    wrapped = trial_context.wrap_dataset(tf.data.Dataset.from_tensor_slices((X, Y)))
    data = validation_data(wrapped.map(lambda x, y: (x * 2, y)).batch(2), trial_context)
    data.reset_count()
    assert sum(labels(data.dataset, 10), []) == [0, 2, 4, 6, 8]  # its round-robin share
    assert data.examples == 5


def test_class_weights_become_sample_weights_of_training_batches(tmp_path):
    trial_context = context(tmp_path, class_weight={0: 0.5, 1: 2.0}, shuffle=False)
    binary = np.array([0, 1, 1, 0], np.int64)
    _, _, weights = next(training_data((X[:4], binary), trial_context).start(0, 0, None, 1))
    assert weights.numpy().tolist() == [0.5, 2.0, 2.0, 0.5]


@pytest.mark.parametrize("kind", ["numpy", "tfdata"])
def test_class_weights_multiply_the_sample_weights_of_training_batches(tmp_path, kind):
    trial_context = context(tmp_path, class_weight={0: 0.5, 1: 2.0}, shuffle=False)
    binary = np.array([[0], [1], [1], [0]], np.float32)  # one sigmoid output per record, as model.fit takes
    sample_weights = np.array([1.0, 1.0, 3.0, 4.0], np.float32)
    loader = (X[:4], binary, sample_weights)
    if kind == "tfdata":
        loader = tf.data.Dataset.from_tensor_slices(loader).batch(4)
    _, _, weights = next(training_data(loader, trial_context).start(0, 0, None, 1))
    assert weights.numpy().tolist() == [0.5, 2.0, 6.0, 2.0]


def test_an_infinite_validation_dataset_needs_validation_steps(tmp_path):
    endless = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4).repeat()
    with pytest.raises(DataError, match=r"is infinite .*configure_fit\(validation_steps=N\)"):
        validation_data(endless, context(tmp_path))
    data = validation_data(endless, context(tmp_path, validation_steps=2))
    assert data.steps == 2


def test_validation_counts_the_examples_keras_evaluates(tmp_path):
    data = validation_data(tf.data.Dataset.from_tensor_slices((X, Y)).batch(4), context(tmp_path, validation_steps=2))
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    for steps, examples in ((data.steps, 8), (None, RECORDS)):
        data.reset_count()
        model.evaluate(data.dataset, steps=steps, verbose=0)
        assert data.examples == examples
