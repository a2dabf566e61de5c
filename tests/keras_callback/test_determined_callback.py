"""DeterminedCallback on one process, in this process: metrics, checkpoints, pause, resume and warm start.

The model is a linear regression trained by SGD with momentum on fixed data in a fixed
order (tests/keras_callback/linear_script.py), so that plain ``model.fit`` gives the
expected weights of every scenario.
"""

import json
import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator.checkpoint import read_checkpoint
from det_estimator.keras._engine._keras_compat import KERAS_3
from det_estimator.store import ExperimentStore, MetricKind

from .linear_script import FEATURES, GLOBAL_BATCH, RECORDS, build_model, data, dataset

STEPS_PER_EPOCH = RECORDS // GLOBAL_BATCH


def plain_fit(epochs: int, start_weights=None) -> np.ndarray:
    """The weights plain Keras reaches, from zeros or from ``start_weights`` with a fresh optimizer."""
    model = build_model()
    if start_weights is not None:
        model.set_weights(start_weights)
    model.fit(dataset(0, 1), epochs=epochs, verbose=0)
    return flat(model)


def flat(model: tf.keras.Model) -> np.ndarray:
    return np.concatenate([w.numpy().ravel() for w in model.weights])


class SignalAt(tf.keras.callbacks.Callback):
    """Sends this process SIGTERM after ``batch`` batches in all (what `experiment pause` amounts to)."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.at, self.count = batch, 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1
        if self.count == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


class CountBatches(tf.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.batches, self.epochs = 0, []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def fit(epochs: int, checkpoint=None, continue_id="run", extra=(), **options):
    """Runs model.fit with the callback inside core.init(); returns the model, the core info and the extras."""
    with det.core.init() as core_context:
        model = build_model()
        callback = det.keras.DeterminedCallback(core_context, checkpoint, continue_id, **options)
        history = model.fit(
            dataset(0, 1),
            epochs=epochs,
            validation_data=dataset(0, 1),
            callbacks=[callback, *extra],
            verbose=0,
        )
        info = core_context.info
    return model, info, history


def latest(info):
    """The trial's checkpoint of the most batches."""
    with ExperimentStore(info.store_path) as store:
        return max(store.checkpoints(info.trial.experiment_id, trial_id=info.trial.trial_id), key=lambda c: c.batches)


def test_metrics_and_checkpoints_of_an_uninterrupted_run_match_plain_keras():
    model, info, history = fit(3, report_every_batches=4)
    np.testing.assert_allclose(flat(model), plain_fit(3), rtol=1e-6)
    with ExperimentStore(info.store_path) as store:
        trial = store.trial(info.trial.trial_id)
        validations = store.metrics(info.trial.trial_id, MetricKind.VALIDATION)
        trainings = store.metrics(info.trial.trial_id, MetricKind.TRAINING)
    assert trial.batches_trained == 3 * STEPS_PER_EPOCH
    assert [v.batches for v in validations] == [8, 16, 24]
    # Validation metrics under Keras' names without the val_ prefix, equal to Keras' own logs.
    np.testing.assert_allclose([v.metrics["loss"] for v in validations], history.history["val_loss"], rtol=1e-6)
    assert [v.metrics["epochs"] for v in validations] == [1, 2, 3]
    assert [t.batches for t in trainings] == [4, 8, 12, 16, 20, 24]
    np.testing.assert_allclose([t.metrics["loss"] for t in trainings[1::2]], history.history["loss"], rtol=1e-6)
    kept = latest(info)
    state = read_checkpoint(kept.path).metadata
    assert (state["epoch"], state["batch"], state["steps_completed"], state["continue_id"]) == (3, 0, 24, "run")


def test_checkpoints_record_the_versions_they_were_written_with_as_the_trial_types_checkpoints_do():
    _, info, _ = fit(1)
    kept = latest(info)
    versions = {"det_estimator": det.__version__, "tensorflow": tf.__version__}  # as EstimatorTrial and TFKerasTrial
    assert kept.metadata["framework"] == versions  # the store's record
    assert read_checkpoint(kept.path).metadata["framework"] == versions  # metadata.json


def test_a_checkpoint_that_records_its_framework_as_older_callbacks_did_still_resumes():
    _, info, _ = fit(2, continue_id="same")
    kept = latest(info)
    metadata = json.loads((Path(kept.path) / "metadata.json").read_text())
    (Path(kept.path) / "metadata.json").write_text(json.dumps({**metadata, "framework": "tensorflow-keras"}))
    resumed, _, _ = fit(4, checkpoint=kept.uuid, continue_id="same")
    np.testing.assert_allclose(flat(resumed), plain_fit(4), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("pause_at", [5, STEPS_PER_EPOCH - 1])  # mid-epoch, and at its last batch
def test_a_pause_stops_within_the_check_period_with_a_checkpoint_and_resumes_exactly(pause_at):
    counter = CountBatches()
    model, info, _ = fit(4, extra=[SignalAt(pause_at), counter], check_preempt_every_batches=2)
    stopped = counter.batches
    assert pause_at <= stopped <= pause_at + 2  # checked every 2 batches
    with ExperimentStore(info.store_path) as store:
        assert store.trial_run(info.trial.run_id).preempted
    paused = latest(info)
    assert paused.batches == stopped
    assert stopped < 4 * STEPS_PER_EPOCH

    # Resumed with the same continue_id: the remaining batches only, ending where a run without a pause ends.
    counter = CountBatches()
    resumed, info, _ = fit(4, checkpoint=paused.uuid, extra=[counter], check_preempt_every_batches=2)
    assert counter.batches == 4 * STEPS_PER_EPOCH - stopped
    assert counter.epochs[0] == stopped // STEPS_PER_EPOCH
    np.testing.assert_allclose(flat(resumed), plain_fit(4), rtol=1e-6, atol=1e-7)
    # The batches are counted on from the pause's (Keras 3 numbers the resumed epoch's from 0).
    final = read_checkpoint(latest(info).path).metadata
    assert (final["epoch"], final["batch"], final["steps_completed"]) == (4, 0, 4 * STEPS_PER_EPOCH)


def test_a_different_continue_id_starts_at_epoch_zero_from_the_checkpoint_weights():
    first, info, _ = fit(2, continue_id="first")
    kept = latest(info)
    counter = CountBatches()
    warm, _, _ = fit(2, checkpoint=kept.uuid, continue_id="second", extra=[counter])
    assert counter.epochs == [0, 1] and counter.batches == 2 * STEPS_PER_EPOCH
    # The checkpoint's weights, with a fresh optimizer (the momentum is not carried over).
    np.testing.assert_allclose(flat(warm), plain_fit(2, start_weights=first.get_weights()), rtol=1e-6, atol=1e-7)
    assert not np.allclose(flat(warm), plain_fit(4), rtol=1e-4)


def test_resuming_restores_the_optimizer_state():
    first, info, _ = fit(2, continue_id="same")
    kept = latest(info)
    resumed, _, _ = fit(4, checkpoint=kept.uuid, continue_id="same")
    np.testing.assert_allclose(flat(resumed), plain_fit(4), rtol=1e-6, atol=1e-7)
    # Without the momentum of the first two epochs the result differs: the test can tell.
    assert not np.allclose(plain_fit(2, start_weights=first.get_weights()), plain_fit(4), rtol=1e-4)


def test_checkpoint_every_batches_and_a_checkpoint_not_written_by_the_callback_is_refused(tmp_path):
    _, info, _ = fit(1, checkpoint_every_batches=3, checkpoint_every_epochs=None)
    with ExperimentStore(info.store_path) as store:
        recorded = store.checkpoints(info.trial.experiment_id, trial_id=info.trial.trial_id, include_deleted=True)
    assert sorted(c.batches for c in recorded) == [3, 6, 8]

    with det.core.init() as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, foreign):
            (path / "weights.npz").write_bytes(b"")
        callback = det.keras.DeterminedCallback(core_context, foreign, "x")
        with pytest.raises(det.core.CheckpointError, match="callback_state.json"):
            build_model().fit(dataset(0, 1), epochs=1, callbacks=[callback], verbose=0)


@pytest.mark.parametrize(
    "name, value", [("report_every_batches", 0), ("checkpoint_every_epochs", -1), ("check_preempt_every_batches", 1.5)]
)
def test_bad_periods_are_refused(name, value):
    with det.core.init() as core_context, pytest.raises(ValueError, match=f"Argument `{name}`"):
        det.keras.DeterminedCallback(core_context, None, None, **{name: value})


@pytest.mark.parametrize(
    "name, value, accepted",
    [
        ("check_preempt_every_batches", 0, "must be a positive int. "),  # None is no check period
        ("check_preempt_every_batches", None, "must be a positive int. "),
        ("train_metrics_report_period", "daily", "must be 'epoch' or a positive int. "),
    ],
)
def test_a_bad_period_is_refused_naming_the_argument_given_and_what_it_takes(name, value, accepted):
    with det.core.init() as core_context, pytest.raises(ValueError) as raised:
        det.keras.DeterminedCallback(core_context, None, None, **{name: value})
    assert str(raised.value) == f"Argument `{name}` {accepted}Received: {name}={value!r}"


def test_tensorboard_writes_into_the_trial_directory():
    with det.core.init() as core_context:
        tensorboard = det.keras.TensorBoard(core_context, log_dir="ignored", update_freq="epoch")
        build_model().fit(dataset(0, 1), epochs=1, callbacks=[tensorboard], verbose=0)
        directory = core_context.train.get_tensorboard_path()
    events = list((directory / "keras").rglob("events.out.tfevents.*"))
    assert events, list(directory.rglob("*"))
    assert not os.path.exists("ignored")


def dropout_model(generators: bool) -> tf.keras.Model:
    """The linear model behind a Dropout layer, its masks from a generator (or TensorFlow's stateful ops)."""
    # Keras 3 layers always draw from seed generators: nothing to turn on or off.
    if generators and not KERAS_3:
        tf.keras.backend.experimental.enable_tf_random_generator()
    try:
        tf.keras.utils.set_random_seed(0)  # the same first masks in every run
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Dropout(0.5, input_shape=(FEATURES,), name="noisy_inputs"),
                tf.keras.layers.Dense(1, kernel_initializer="zeros"),
            ]
        )
    finally:
        if not KERAS_3:
            tf.keras.backend.experimental.disable_tf_random_generator()
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")
    return model


def fit_dropout(epochs: int, generators: bool, checkpoint=None, extra=()):
    with det.core.init() as core_context:
        model = dropout_model(generators)
        callback = det.keras.DeterminedCallback(core_context, checkpoint, "run", check_preempt_every_batches=1)
        model.fit(dataset(0, 1), epochs=epochs, callbacks=[callback, *extra], verbose=0)
        info = core_context.info
    return model, info


def test_dropout_from_generators_draws_after_a_resume_the_masks_of_an_uninterrupted_run(caplog):
    uninterrupted, _ = fit_dropout(3, generators=True)
    _, info = fit_dropout(3, generators=True, extra=[SignalAt(STEPS_PER_EPOCH + 3)])
    paused = latest(info)
    assert STEPS_PER_EPOCH + 3 <= paused.batches < 2 * STEPS_PER_EPOCH  # in the second epoch
    resumed, _ = fit_dropout(3, generators=True, checkpoint=paused.uuid)
    np.testing.assert_allclose(flat(resumed), flat(uninterrupted), rtol=1e-6, atol=1e-7)
    assert "noisy_inputs" not in caplog.text
    # The masks matter: a run that draws them afresh from the start ends elsewhere.
    restarted, _ = fit_dropout(2, generators=True)
    assert not np.allclose(flat(restarted), flat(uninterrupted), rtol=1e-3)


class ShuffledBatches(tf.keras.utils.Sequence):
    """The linear data's batches as a Sequence, which fit (shuffle=True by default) reads in a new order each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.x, self.y = data()

    def __len__(self) -> int:
        return STEPS_PER_EPOCH

    def __getitem__(self, index: int):
        rows = slice(index * GLOBAL_BATCH, (index + 1) * GLOBAL_BATCH)
        return self.x[rows], self.y[rows]


def fit_shuffled(seed: int, checkpoint=None, extra=()):
    """Three epochs of the shuffled Sequence from Python's random seeded with ``seed``, as a script seeds it."""
    random.seed(seed)
    with det.core.init() as core_context:
        model = build_model()
        callback = det.keras.DeterminedCallback(core_context, checkpoint, "run", check_preempt_every_batches=1)
        model.fit(ShuffledBatches(), epochs=3, callbacks=[callback, *extra], verbose=0)
        info = core_context.info
    return model, info


def test_a_shuffled_sequence_resumed_mid_epoch_reads_the_order_of_an_uninterrupted_run():
    uninterrupted, _ = fit_shuffled(seed=3)
    _, info = fit_shuffled(seed=3, extra=[SignalAt(STEPS_PER_EPOCH + 3)])
    paused = latest(info)
    assert STEPS_PER_EPOCH + 3 <= paused.batches < 2 * STEPS_PER_EPOCH  # in the second epoch
    # The script seeds Python's random afresh when it resumes, as a restarted process does.
    resumed, _ = fit_shuffled(seed=3, checkpoint=paused.uuid)
    np.testing.assert_allclose(flat(resumed), flat(uninterrupted), rtol=1e-6, atol=1e-7)
    # The order matters: another seed ends elsewhere.
    other, _ = fit_shuffled(seed=4)
    assert not np.allclose(flat(other), flat(uninterrupted), rtol=1e-4)


def fit_shuffled_dataset(epochs: int, checkpoint=None, extra=(), reshuffle: bool = True):
    """The linear data as a tf.data.Dataset shuffled with a fixed seed, in a new order each epoch."""
    x, y = data()
    training = tf.data.Dataset.from_tensor_slices((x, y))
    training = training.shuffle(RECORDS, seed=5, reshuffle_each_iteration=reshuffle).batch(GLOBAL_BATCH)
    with det.core.init() as core_context:
        model = build_model()
        callback = det.keras.DeterminedCallback(core_context, checkpoint, "run", check_preempt_every_batches=1)
        model.fit(training, epochs=epochs, callbacks=[callback, *extra], verbose=0)
        info = core_context.info
    return model, info


@pytest.mark.parametrize("pause_at", [2 * STEPS_PER_EPOCH + 3, 2 * STEPS_PER_EPOCH])  # mid-epoch, at an epoch's end
def test_a_reshuffled_dataset_resumed_reads_the_order_of_an_uninterrupted_run(pause_at):
    # Each epoch's iterator of a shuffled dataset draws its order from the dataset's seed
    # generator; the resumed process's dataset starts that generator afresh.
    uninterrupted, _ = fit_shuffled_dataset(4)
    _, info = fit_shuffled_dataset(4, extra=[SignalAt(pause_at - 1)])  # seen at the next batch
    paused = latest(info)
    assert paused.batches == pause_at
    counter = CountBatches()
    resumed, _ = fit_shuffled_dataset(4, checkpoint=paused.uuid, extra=[counter])
    assert counter.batches == 4 * STEPS_PER_EPOCH - pause_at
    np.testing.assert_allclose(flat(resumed), flat(uninterrupted), rtol=1e-6, atol=1e-7)
    # The order matters: the same order every epoch ends elsewhere.
    fixed_order, _ = fit_shuffled_dataset(4, reshuffle=False)
    assert not np.allclose(flat(fixed_order), flat(uninterrupted), rtol=1e-4)


@pytest.mark.skipif(KERAS_3, reason="Keras 3 layers always draw from seed generators")
def test_a_resume_warns_of_layers_without_generators(caplog):
    _, info = fit_dropout(2, generators=False, extra=[SignalAt(3)])
    with caplog.at_level("WARNING", logger="det_estimator.keras"):
        fit_dropout(2, generators=False, checkpoint=latest(info).uuid)
    assert "Layers noisy_inputs draw from TensorFlow's stateful random ops" in caplog.text
    assert "enable_tf_random_generator()" in caplog.text
