"""Callbacks in a Keras trial: stateful ones kept across pauses, epochs from records_per_epoch, TensorBoard."""

import logging
import math
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import plugin_event_accumulator

import det_estimator as det
from det_estimator._root_cause import root_cause
from det_estimator.keras._engine import _callback_states
from det_estimator.store import ExperimentStore

# With these settings the closed-form validation loss improves by more than 1.0 up to the
# validation after 25 batches, once more (against the best) after 35, and then no more.
PLATEAU = {"monitor": "val_loss", "min_delta": 1.0, "patience": 2}


def run(analytic_keras, directory, batches, **hparams):
    config = analytic_keras.make_config(directory, batches)
    config["hyperparameters"].update(hparams)
    return det.run_trial(analytic_keras.AnalyticKerasTrial, config)


def test_early_stopping_stops_at_the_same_validation_with_and_without_a_pause(analytic_keras, tmp_path):
    straight = run(analytic_keras, tmp_path / "straight", 200, early_stopping=PLATEAU)
    assert (straight.state, straight.batches_trained) == ("COMPLETED", 45)  # the 9th validation
    assert straight.checkpoints[-1]["batches"] == 45

    # Paused after 42 batches: one validation (at 40) without improvement is behind it.
    paused = run(analytic_keras, tmp_path / "paused", 200, early_stopping=PLATEAU, pause_at_batch=42)
    assert (paused.state, paused.batches_trained) == ("PAUSED", 42)
    resumed = run(analytic_keras, tmp_path / "paused", 200, early_stopping=PLATEAU, pause_at_batch=42)
    assert (resumed.state, resumed.batches_trained) == ("COMPLETED", 45)
    assert [v["batches"] for v in resumed.validations] == [45]


def test_reduce_lr_on_plateau_gives_the_learning_rates_of_an_uninterrupted_run_after_a_resume(analytic_keras, tmp_path):
    reduce_lr = {**PLATEAU, "factor": 0.5}
    straight = run(analytic_keras, tmp_path / "straight", 65, reduce_lr=reduce_lr)
    # Paused after 52 batches: after a reduction (at 45) and a validation without improvement (at 50).
    paused = run(analytic_keras, tmp_path / "paused", 65, reduce_lr=reduce_lr, pause_at_batch=52)
    assert (paused.state, paused.batches_trained) == ("PAUSED", 52)
    resumed = run(analytic_keras, tmp_path / "paused", 65, reduce_lr=reduce_lr, pause_at_batch=52)

    def rates(*outcomes):
        return [v["metrics"]["val_learning_rate"] for outcome in outcomes for v in outcome.validations]

    assert rates(paused, resumed) == rates(straight)
    # Each validation reports the rate it was made with: cut by the validations at 45 and 55.
    assert rates(straight)[-5:] == pytest.approx([0.01, 0.005, 0.005, 0.0025, 0.0025])
    assert resumed.validations[-1]["metrics"]["val_weight"] == straight.validations[-1]["metrics"]["val_weight"]


def test_plain_keras_callbacks_run_at_the_points_model_fit_would(analytic_keras, tmp_path):
    calls = []
    recorder = tf.keras.callbacks.LambdaCallback(
        on_train_begin=lambda logs: calls.append("train_begin"),
        on_epoch_begin=lambda epoch, logs: calls.append(f"epoch_begin {epoch}"),
        on_epoch_end=lambda epoch, logs: calls.append(f"epoch_end {epoch} {logs}"),
        on_train_batch_end=lambda batch, logs: calls.append(f"batch {batch} {sorted(logs)}"),
        on_test_begin=lambda logs: calls.append("test_begin"),
        on_test_batch_end=lambda batch, logs: calls.append("test_batch"),
        on_test_end=lambda logs: calls.append(f"test_end {logs['records']}"),
        on_train_end=lambda logs: calls.append("train_end"),
    )

    class WithRecorder(analytic_keras.AnalyticKerasTrial):
        def keras_callbacks(self):
            return [*super().keras_callbacks(), recorder]

    det.run_trial(WithRecorder, analytic_keras.make_config(tmp_path, 10))
    batch_names = "['learning_rate', 'loss', 'records', 'weight']"
    assert calls[:3] == ["train_begin", "epoch_begin 0", f"batch 0 {batch_names}"]
    # 8 batches per epoch: the 8th batch has index 7, then the epoch ends with empty logs.
    assert calls[calls.index("epoch_end 0 {}") - 1] == f"batch 7 {batch_names}"
    assert calls[calls.index("epoch_end 0 {}") + 1 : calls.index("epoch_end 0 {}") + 3] == [
        "epoch_begin 1",
        f"batch 0 {batch_names}",
    ]
    # Each validation: the test hooks, 8 batches here, and on_test_end with every process's records.
    assert calls.count("test_begin") == 2 and calls.count("test_batch") == 16
    assert calls.count("test_end 64.0") == 2
    assert calls[-1] == "train_end"


def test_without_records_per_epoch_an_on_epoch_end_is_an_error_or_a_warning(analytic_keras, tmp_path, caplog):
    config = analytic_keras.make_config(tmp_path, 5)
    del config["records_per_epoch"]
    with pytest.raises(det.DetEstimatorError, match="Events overrides on_epoch_end.*no records_per_epoch"):
        det.run_trial(analytic_keras.AnalyticKerasTrial, config)

    class PlainCallbacks(analytic_keras.AnalyticKerasTrial):
        def keras_callbacks(self):
            return [tf.keras.callbacks.LambdaCallback(on_epoch_end=print), tf.keras.callbacks.EarlyStopping()]

    with caplog.at_level(logging.WARNING, logger="det_estimator.keras"):
        outcome = det.run_trial(PlainCallbacks, config)
    assert outcome.state == "COMPLETED"
    assert "LambdaCallback overrides on_epoch_end, which never runs" in caplog.text
    assert "use det.keras.callbacks.EarlyStopping" in caplog.text


def test_a_state_that_cannot_be_stored_is_refused_with_its_path(analytic_keras, tmp_path):
    class Unstorable(det.keras.callbacks.Callback):
        def get_state(self):
            return {"fine": [1, 2.5, None], "bad": [object()]}

    class WithUnstorable(analytic_keras.AnalyticKerasTrial):
        def keras_callbacks(self):
            return [Unstorable()]

    refused = r"Received: builtins.object at .*Unstorable \(callback 0\).get_state\(\)"
    with pytest.raises(TypeError, match=refused) as raised:
        det.run_trial(WithUnstorable, analytic_keras.make_config(tmp_path, 5))
    # No frame of the user's raised it: the command shows the message alone, not det-estimator's frames.
    cause = root_cause(raised.value, rank=0)
    assert cause.traceback == f"CallbackStateError: {cause.message}"


def test_states_round_trip_through_json_and_an_npz_read_without_pickle(tmp_path):
    class Stateful(det.keras.callbacks.Callback):
        def __init__(self, state):
            super().__init__()
            self.state, self.loaded = state, None

        def get_state(self):
            return self.state

        def load_state(self, state):
            self.loaded = state

    weights = [np.arange(6, dtype=np.float32).reshape(2, 3), np.float64(2.5)]
    state = {"best": math.inf, "nan": math.nan, "pair": (1, "a"), "weights": weights, "tensor": tf.constant([1, 2])}
    written = [Stateful(state), Stateful(None), det.keras.callbacks.EarlyStopping()]
    written[2].on_train_begin()
    _callback_states.write_states(tmp_path, written)
    assert not list(tmp_path.glob("*.pkl"))
    with np.load(tmp_path / _callback_states.ARRAYS_FILE, allow_pickle=False) as arrays:
        assert len(arrays.files) == 2  # the matrix and the tensor; the scalar went into the JSON

    read = [Stateful(None), Stateful(None), det.keras.callbacks.EarlyStopping()]
    _callback_states.load_states(_callback_states.read_states(tmp_path), read)
    loaded = read[0].loaded
    assert loaded["best"] == math.inf and math.isnan(loaded["nan"]) and loaded["pair"] == [1, "a"]
    np.testing.assert_array_equal(loaded["weights"][0], weights[0])
    assert loaded["weights"][1] == 2.5 and loaded["tensor"].tolist() == [1, 2]
    assert read[1].loaded is None  # a None state saves nothing
    fresh = det.keras.callbacks.EarlyStopping()
    fresh.on_train_begin()  # Keras 2 starts at an infinity, Keras 3 at None
    assert read[2].best == fresh.best and read[2].wait == 0


def test_a_changed_callback_list_resumes_the_callbacks_still_at_their_place(tmp_path, caplog):
    early, reduce_lr = det.keras.callbacks.EarlyStopping(), det.keras.callbacks.ReduceLROnPlateau()
    for callback in (early, reduce_lr):
        callback.on_train_begin()
        callback.wait = 3
    _callback_states.write_states(tmp_path, [early, reduce_lr])
    same_place, other = det.keras.callbacks.EarlyStopping(), det.keras.callbacks.EarlyStopping()
    with caplog.at_level(logging.WARNING, logger="det_estimator.keras"):
        _callback_states.load_states(_callback_states.read_states(tmp_path), [same_place, other])
    assert (same_place.wait, other.wait) == (3, 0)
    assert "callback 1 (det_estimator.keras.callbacks._early_stopping.EarlyStopping) has no saved state" in caplog.text


def test_early_stopping_keeps_its_best_weights_in_its_state(tmp_path):
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    early = det.keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    early.set_model(model)
    early.on_train_begin()
    early.on_test_end({"loss": 1.0})
    best = model.get_weights()
    model.set_weights([weight + 1 for weight in best])
    _callback_states.write_states(tmp_path, [early])

    resumed = det.keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    resumed.set_model(model)
    resumed.on_train_begin()
    _callback_states.load_states(_callback_states.read_states(tmp_path), [resumed])
    resumed.on_test_end({"loss": 2.0})  # no improvement: stop and restore the best weights
    assert model.stop_training and resumed.stopped_epoch == 1
    for restored, expected in zip(model.get_weights(), best):
        np.testing.assert_array_equal(restored, expected)


def test_the_tensorboard_callback_writes_in_the_trials_directory_whatever_log_dir_says(analytic_keras, tmp_path):
    class WithTensorBoard(analytic_keras.AnalyticKerasTrial):
        def keras_callbacks(self):
            return [det.keras.TFKerasTensorBoard(log_dir=str(tmp_path / "elsewhere"), histogram_freq=1)]

    outcome = det.run_trial(WithTensorBoard, analytic_keras.make_config(tmp_path, 10))
    assert not (tmp_path / "elsewhere").exists()
    with ExperimentStore() as store:
        directory = store.trial(outcome.trial_id).tensorboard_dir
    written = {path.parent.name for path in (tmp_path.parent / directory).glob("keras/*/events.out.tfevents.*")}
    assert written == {"train", "validation"}
    tags = set()
    for path in (tmp_path.parent / directory).glob("keras/train/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    assert {"epoch_loss", "epoch_weight"} <= tags  # each workload's training metrics


def test_the_tensorboard_callback_drops_the_points_a_killed_run_wrote_past_its_checkpoint(analytic_keras, tmp_path):
    class WithTensorBoard(analytic_keras.AnalyticKerasTrial):
        def keras_callbacks(self):
            return [*super().keras_callbacks(), det.keras.callbacks.TensorBoard()]

    config = analytic_keras.make_config(tmp_path, 20)
    config["hyperparameters"]["pause_at_batch"] = 12
    paused = det.run_trial(WithTensorBoard, config)
    assert (paused.state, paused.batches_trained) == ("PAUSED", 12)  # checkpointed after 12 batches
    with ExperimentStore() as store:
        train_dir = tmp_path.parent / store.trial(paused.trial_id).tensorboard_dir / "keras" / "train"
    # What a run killed at batch 16 leaves: a point past the checkpoint, which the resume trains again.
    with tf.summary.create_file_writer(str(train_dir)).as_default():
        tf.summary.scalar("epoch_loss", 1e6, step=15)
    time.sleep(1.1)  # TensorBoard reads a folder's files in the order of their names, which start with the time

    config["hyperparameters"]["pause_at_batch"] = 0
    assert det.run_trial(WithTensorBoard, config).state == "COMPLETED"
    # The accumulator the TensorBoard server reads Keras' (tensor) summaries with.
    accumulator = plugin_event_accumulator.EventAccumulator(str(train_dir), tensor_size_guidance={"epoch_loss": 0})
    accumulator.Reload()
    points = [(event.step, float(tf.make_ndarray(event.tensor_proto))) for event in accumulator.Tensors("epoch_loss")]
    assert [step for step, _ in points] == [5, 10, 12, 15, 20]
    assert max(value for _, value in points) < 1e6
