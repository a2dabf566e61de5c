"""context.fit's bookkeeping: epochs from searcher lengths, equal batches on every process, validation required."""

import numpy as np
import pytest
import tensorflow as tf

from det_estimator import _horovod
from det_estimator.core import DummyDistributedContext, Unit
from det_estimator.errors import DetEstimatorError
from det_estimator.keras._api import _fit
from det_estimator.keras._api._context import DistributedInfo, KerasContext, Optimizations, TrainingContext


@pytest.mark.parametrize(
    ("unit", "length", "steps_per_epoch", "global_batch_size", "epochs"),
    [
        (Unit.EPOCHS, 7, None, None, 7),
        (Unit.BATCHES, 100, 25, None, 4),
        (Unit.BATCHES, 101, 25, None, 5),  # rounded up to a whole epoch
        (Unit.BATCHES, 3, 25, None, 1),
        (Unit.RECORDS, 3200, 25, 32, 4),
        (Unit.RECORDS, 3201, 25, 32, 5),
    ],
)
def test_searcher_lengths_become_whole_epochs(unit, length, steps_per_epoch, global_batch_size, epochs):
    assert _fit.Lengths(unit, steps_per_epoch, global_batch_size).epochs(length) == epochs


def test_a_length_in_batches_needs_the_batches_of_an_epoch():
    with pytest.raises(_fit.FitError, match="give max_length in epochs, or pass steps_per_epoch"):
        _fit.Lengths(Unit.BATCHES, None, 32).epochs(100)


def test_every_process_trains_the_fewest_batches_any_has(one_of_many):
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    # This process has 5 batches of 2; the other 4.
    cut_x, cut_y, cut_w, steps = _fit.equal_steps(one_of_many(0, 2, [None, 4]), x, y, None, batch_size=2)
    assert steps is None and len(cut_x) == len(cut_y) == 8 and cut_w is None
    np.testing.assert_array_equal(cut_y, y[:8])

    dataset = tf.data.Dataset.range(10).batch(2)
    cut, _, _, steps = _fit.equal_steps(one_of_many(0, 2, [None, 4]), dataset, None, None, None)
    assert steps is None and int(cut.cardinality()) == 4

    _, _, _, steps = _fit.equal_steps(one_of_many(1, 2, [6, None]), FiveBatches(), None, None, None)
    assert steps == 5


def test_an_input_of_unknown_length_needs_steps_per_epoch_on_several_processes(one_of_many):
    endless = tf.data.Dataset.range(10).repeat()
    with pytest.raises(_fit.FitError, match="pass steps_per_epoch"):
        _fit.equal_steps(one_of_many(0, 2, [None, 3]), endless, None, None, None)


def test_local_steps_follow_keras_defaults():
    assert _fit.local_steps(np.zeros((65, 3)), None) == 3  # Keras' batch of 32
    assert _fit.local_steps((np.zeros((10, 1)), np.zeros((10, 1))), 4) == 3
    assert _fit.local_steps(tf.data.Dataset.range(7).batch(3), None) == 3
    assert _fit.local_steps(tf.data.Dataset.range(7).filter(lambda v: v > 2), None) is None


def test_histories_of_several_fit_calls_are_merged_in_order():
    first, second = tf.keras.callbacks.History(), tf.keras.callbacks.History()
    first.epoch, first.history = [0, 1], {"loss": [3.0, 2.0], "val_loss": [3.5, 2.5]}
    second.epoch, second.history = [2], {"loss": [1.0], "val_loss": [1.5]}
    merged = _fit.merge_histories([first, None, second])
    assert merged.epoch == [0, 1, 2] and merged.history == {"loss": [3.0, 2.0, 1.0], "val_loss": [3.5, 2.5, 1.5]}
    assert second.epoch == [2] and second.history == {"loss": [1.0], "val_loss": [1.5]}  # left as they were
    assert _fit.searcher_metric_value(merged, "val_loss") == 1.5
    assert _fit.searcher_metric_value(merged, "loss") == 1.5  # the validation loss, as the callback reports it
    with pytest.raises(_fit.FitError, match="val_loss"):
        _fit.searcher_metric_value(merged, "accuracy")


def context(launched: bool = True, distributed=None) -> KerasContext:
    training = TrainingContext(hparams={}, trial_id=1, experiment_id=1, seed=0, core=None, launched=launched)
    return KerasContext(distributed or DummyDistributedContext(), training, {}, 0, Optimizations(), None, "TRIAL")


def test_fit_in_an_experiment_requires_validation_data():
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(_fit.FitError, match="needs validation data"):
        context().fit(model, np.zeros((4, 1)), np.zeros((4, 1)), epochs=1)
    with pytest.raises(_fit.FitError, match="not both"):
        context().fit(model, np.zeros((4, 1)), np.zeros((4, 1)), x_val=1, y_val=1, validation_data=(1, 1))


class TwoOptimizers(tf.keras.Model):
    """Two parts, each trained by an optimizer of its own, held as attributes, as a GAN's are."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = tf.keras.layers.Dense(1), tf.keras.layers.Dense(1)

    def call(self, x):
        return self.a(x) + self.b(x)

    def compile(self, a_optimizer, b_optimizer):
        super().compile(loss="mse")  # model.optimizer: Keras' default, which the train step does not use
        self.a_optimizer, self.b_optimizer = a_optimizer, b_optimizer


def test_on_several_processes_fit_takes_a_model_whose_optimizers_are_each_wrapped(one_of_many, monkeypatch):
    monkeypatch.setattr(_horovod, "is_distributed", lambda: True)
    monkeypatch.setattr(
        _horovod,
        "keras_distributed_optimizer",
        lambda optimizer, **settings: optimizer.from_config(optimizer.get_config()),
    )
    on_two = context(distributed=one_of_many(0, 2))
    x, y = np.zeros((8, 1), np.float32), np.zeros((8, 1), np.float32)
    wrapped = TwoOptimizers()
    wrapped.compile(on_two.wrap_optimizer(tf.keras.optimizers.SGD()), on_two.wrap_optimizer(tf.keras.optimizers.Adam()))
    on_two._prepare_inputs(wrapped, x, y, {"batch_size": 2})  # the proposal: "just wrap each of them individually"

    forgotten = TwoOptimizers()
    forgotten.compile(tf.keras.optimizers.SGD(), tf.keras.optimizers.Adam())
    with pytest.raises(_fit.FitError, match=r"context.wrap_optimizer\(\) returns"):
        on_two._prepare_inputs(forgotten, x, y, {"batch_size": 2})


def test_a_job_has_no_training_context():
    job = KerasContext(DummyDistributedContext(), None, {"trial_id": 3}, 0, Optimizations(), None, "BATCH_INFERENCE")
    assert job.config_data == {"trial_id": 3}
    with pytest.raises(DetEstimatorError, match="not available in a BATCH_INFERENCE job"):
        job.training  # noqa: B018


@pytest.mark.parametrize("size", [1, 2, 4])
def test_shard_batch_size_divides_the_global_batch(one_of_many, size):
    assert DistributedInfo(one_of_many(0, size)).shard_batch_size(64) == 64 // size


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (33, ValueError, r"multiple of the number of processes \(2\).*global_batch_size=33 \(use 32\)"),
        (0, ValueError, "positive multiple"),
        (32.0, TypeError, "must be an int"),
        (True, TypeError, "must be an int"),
    ],
)
def test_shard_batch_size_refuses_what_does_not_divide(one_of_many, value, error, match):
    with pytest.raises(error, match=match):
        DistributedInfo(one_of_many(0, 2)).shard_batch_size(value)


def test_the_distributed_info_is_the_core_context_with_shard_batch_size(one_of_many):
    info = DistributedInfo(one_of_many(1, 2))
    assert (info.rank, info.size) == (1, 2)
    assert info.allgather("mine") == ["mine", "mine"]


class FiveBatches(tf.keras.utils.Sequence):
    def __len__(self) -> int:
        return 5

    def __getitem__(self, index: int):
        return np.zeros((2, 1)), np.zeros((2, 1))
