"""The one-weight analytic trial as a TFKerasTrial, fed by NumPy arrays, a Sequence or a tf.data pipeline.

The model is ``prediction = w * x`` (one Dense unit, no bias, starting at 0) with a mean
squared error loss and plain SGD, on the 64 records of ``analytic_closed_form``. Each loader
gives process ``rank`` of ``size`` its half (quarter, ...) of every global batch, so the
averaged gradient is the gradient of the whole global batch and the weight follows
``analytic_closed_form.trajectory`` on any number of processes.

``start_run`` starts the trial as a separate process (``run_analytic_keras.py``), for
tests that pause or kill it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from analytic_closed_form import FEATURES, NUM_RECORDS, TARGETS, expected_weight, expected_workload_losses, trajectory

import det_estimator as det
from det_estimator.reducers import MetricReducer

__all__ = [
    "NUM_RECORDS",
    "expected_weight",
    "expected_workload_losses",
    "trajectory",
]

LOADERS = ("numpy", "sequence", "tfdata")
# The process a pause at a batch is asked of (default: the worker itself), and how long a
# worker then waits for the pause to come back to it through the launcher.
PAUSE_PID = "ANALYTIC_PAUSE_PID"
PAUSE_ARRIVAL_SECONDS = 3.0
SERVING_INPUT = np.array([[0.5], [2.0], [4.0]], dtype=np.float32)


def make_config(tmp_path, max_batches: int, loader: str = "numpy", **overrides) -> dict:
    config = {
        "entrypoint": "analytic_keras_trial:AnalyticKerasTrial",
        "name": "analytic-keras",
        "hyperparameters": {
            "global_batch_size": 8,
            "learning_rate": 0.01,
            "loader": loader,
            "events_dir": str(tmp_path / "events"),
        },
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": max_batches}},
        "records_per_epoch": NUM_RECORDS,
        "scheduling_unit": 5,
        "min_validation_period": {"batches": 5},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        "reproducibility": {"experiment_seed": 1},
        # A failure ends the run: the tests of failures need no automatic restarts.
        "max_restarts": 0,
    }
    config.update(overrides)
    return config


def validation_loss(weight: float, records: int = NUM_RECORDS) -> float:
    """The validation loss at ``weight`` over the first ``records`` records."""
    x, y = FEATURES[:records].astype(np.float64), TARGETS[:records].astype(np.float64)
    return float(np.mean((weight * x - y) ** 2))


def assert_closed_form(validations, learning_rate: float = 0.01, global_batch_size: int = 8) -> None:
    """Every validation reports the closed-form weight and loss, over all 64 records (every process's share)."""
    assert validations
    for validation in validations:
        expected = expected_weight(validation["batches"], learning_rate, global_batch_size)
        assert validation["metrics"]["val_weight"] == pytest.approx(expected, rel=1e-5)
        assert validation["metrics"]["val_loss"] == pytest.approx(validation_loss(expected), rel=1e-5)
        assert validation["metrics"]["val_records"] == NUM_RECORDS


def start_run(directory: Path, max_batches: int, slots: int, seconds_per_batch: float = 0.0, **hparams):
    """Starts run_analytic_keras.py in a process group of its own (stdout and stderr merged)."""
    script = Path(__file__).parent / "run_analytic_keras.py"
    command = [sys.executable, str(script), str(directory), str(max_batches), str(slots), str(seconds_per_batch)]
    return subprocess.Popen(
        [*command, json.dumps(hparams)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )


class WeightMetric(tf.keras.metrics.Metric):
    """Reports the model's weight (in training and validation metrics alike)."""

    def __init__(self, read_weight, name: str = "weight"):
        super().__init__(name=name, dtype=tf.float64)
        self._read_weight = read_weight  # a function, so that Keras does not track (and reset) the variable

    def update_state(self, *args, **kwargs):
        return None

    def result(self):
        return tf.cast(tf.reshape(self._read_weight(), []), tf.float64)

    def reset_state(self):
        pass


class LearningRateMetric(WeightMetric):
    """Reports the optimizer's learning rate."""

    def __init__(self, model):
        super().__init__(lambda: model.optimizer.learning_rate, name="learning_rate")


class RecordCount(MetricReducer):
    """Counts the records of every process."""

    def __init__(self):
        self.records = 0

    def accumulate(self, metric):
        self.records += len(metric["labels"])
        return self.records

    def cross_slot_reduce(self, per_slot_metrics):
        return float(sum(per_slot_metrics))


class Records(tf.keras.utils.Sequence):
    """Batches of ``batch_size`` consecutive records; ``on_epoch_end`` calls are counted."""

    def __init__(self, features, targets, batch_size: int):
        self.features, self.targets, self.batch_size = features, targets, batch_size
        self.epoch_ends = 0

    def __len__(self):
        return -(-len(self.features) // self.batch_size)

    def __getitem__(self, index):
        rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.features[rows], self.targets[rows]

    def on_epoch_end(self):
        self.epoch_ends += 1


class Events(det.keras.callbacks.Callback):
    """Records the harness's calls in a file per rank, pauses the run or slows it down when asked."""

    def __init__(
        self, events_dir: str, rank: int, seconds_per_batch: float, pause_at_batch: int, pause_during_work: dict
    ):
        super().__init__()
        os.makedirs(events_dir, exist_ok=True)
        self._log = os.path.join(events_dir, f"rank{rank}.jsonl")
        self._rank = rank
        self._seconds_per_batch = seconds_per_batch
        self._pause_at_batch = pause_at_batch
        self._pause_during_work = pause_during_work
        self.checkpoints = 0

    def record(self, event: str, **details) -> None:
        with open(self._log, "a") as log:
            log.write(json.dumps({"event": event, **details}) + "\n")

    def on_train_batch_end(self, batch, logs=None):
        if self._seconds_per_batch:
            time.sleep(self._seconds_per_batch)  # gives a test time to interrupt the run
        if self._pause_at_batch and int(self.model.optimizer.iterations.numpy()) == self._pause_at_batch:
            self._ask_to_pause()

    def _ask_to_pause(self) -> None:
        """SIGTERM, what `experiment pause` or Ctrl-C amount to, to the process that runs the trial.

        That is this process, unless ``ANALYTIC_PAUSE_PID`` names the process that called
        ``run_trial`` for workers it started: it then passes the pause on to them, which
        this process waits for, so that the pause lands at this batch.
        """
        launching = int(os.environ.get(PAUSE_PID, os.getpid()))
        os.kill(launching, signal.SIGTERM)
        if launching != os.getpid():
            time.sleep(PAUSE_ARRIVAL_SECONDS)

    def on_train_workload_begin(self, total_batches_trained, batches_requested, logs):
        self.record("workload_begin", batches=total_batches_trained, requested=batches_requested)

    def on_train_workload_end(self, total_batches_trained, logs):
        self.record("workload_end", batches=total_batches_trained, loss=logs["loss"])

    def on_epoch_end(self, epoch, logs=None):
        self.record("epoch_end", epoch=epoch, logs=logs)

    def on_test_end(self, logs=None):
        self.record("test_end", logs=logs)
        self._pause_during("validation")

    def on_checkpoint_end(self, checkpoint_dir):
        Path(checkpoint_dir, "events_note.txt").write_text(f"checkpoint {self.checkpoints + 1}")
        self.checkpoints += 1
        self.record("checkpoint_end", batches=int(self.model.optimizer.iterations.numpy()))
        self._pause_during("checkpoint")

    def _pause_during(self, work: str) -> None:
        """A pause asked for while the trial validates or checkpoints, when the hyperparameters say so."""
        if self._pause_during_work == {"work": work, "batch": int(self.model.optimizer.iterations.numpy())}:
            os.kill(os.getpid(), signal.SIGTERM)

    def get_state(self):
        return {"checkpoints": self.checkpoints, "array": np.arange(3.0) * self.checkpoints}

    def load_state(self, state):
        self.checkpoints = state["checkpoints"]
        self.record("load_state", checkpoints=state["checkpoints"], array=state["array"].tolist())


class StopAt(det.keras.callbacks.Callback):
    """Sets ``model.stop_training`` once the model has trained ``batch`` batches in all, as a user's callback would."""

    def __init__(self, batch: int):
        super().__init__()
        self._batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self._batch:
            self.model.stop_training = True


def events(events_dir, rank: int = 0) -> list[dict]:
    path = Path(events_dir) / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class GuideTrainStep(tf.keras.Sequential):
    """The custom train step of Keras' guide: ``tape.gradient``, then ``optimizer.apply_gradients``."""

    def train_step(self, data):
        x, y = data
        loss_scaled = isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
            if loss_scaled:  # as the mixed precision guide's training loop does
                loss = self.optimizer.get_scaled_loss(loss)
        gradients = tape.gradient(loss, self.trainable_variables)
        if loss_scaled:
            gradients = self.optimizer.get_unscaled_gradients(gradients)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.compiled_metrics.update_state(y, y_pred)
        return {metric.name: metric.result() for metric in self.metrics}


class AnalyticKerasTrial(det.keras.TFKerasTrial):
    def __init__(self, context):
        super().__init__(context)
        self.context.configure_fit(shuffle=bool(context.get_hparams().get("shuffle", False)), verbose=True)

    def _reported_weight(self, model):
        nan_before = self.context.get_hparams().get("nan_weight_before")
        if nan_before is None:
            return lambda: model.layers[-1].kernel
        # An undefined metric at the first validations.
        return lambda: tf.where(model.optimizer.iterations < nan_before, np.nan, model.layers[-1].kernel)

    def build_model(self):
        layers = [tf.keras.Input(shape=(1,), name="x")]
        if self.context.get_hparams().get("dropout"):  # randomness a resume must restore
            layers.append(tf.keras.layers.Dropout(self.context.get_hparam("dropout")))
        layers.append(tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros"))
        sequential = GuideTrainStep if self.context.get_hparams().get("custom_train_step") else tf.keras.Sequential
        model = self.context.wrap_model(sequential(layers))
        optimizers = (
            tf.keras.optimizers.legacy if self.context.get_hparams().get("legacy_optimizer") else tf.keras.optimizers
        )
        optimizer = optimizers.SGD(self.context.get_hparam("learning_rate"))
        if self.context.get_hparams().get("wrap_optimizer", True):
            optimizer = self.context.wrap_optimizer(optimizer)
        if self.context.get_hparams().get("loss_scaled"):
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
        metrics = [
            WeightMetric(self._reported_weight(model)),
            LearningRateMetric(model),
            det.keras.ReducerMetric(RecordCount(), name="records"),
        ]
        model.compile(
            optimizer,
            loss="mse",
            metrics=metrics,
            run_eagerly=self.context.get_hparams().get("eagerly"),
            steps_per_execution=self.context.get_hparams().get("steps_per_execution", 1),
        )
        return model

    def _loader(self, records: int):
        x, y = FEATURES[:records, None], TARGETS[:records, None]
        loader = self.context.get_hparam("loader")
        if loader == "numpy":
            return x, y
        if loader == "sequence":
            return Records(x, y, self.context.get_per_slot_batch_size())
        if loader == "adapter":
            return det.keras.SequenceAdapter(Records(x, y, self.context.get_per_slot_batch_size()), workers=2)
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if self.context.get_hparams().get("wrap_dataset", True):
            dataset = self.context.wrap_dataset(dataset)
        if self.context.get_hparams().get("shuffle"):
            dataset = dataset.shuffle(NUM_RECORDS, seed=self.context.get_trial_seed())
        return dataset.batch(self.context.get_per_slot_batch_size())

    def build_training_data_loader(self):
        return self._loader(NUM_RECORDS)

    def build_validation_data_loader(self):
        return self._loader(self.context.get_hparams().get("validation_records", NUM_RECORDS))

    def keras_callbacks(self):
        hparams = self.context.get_hparams()
        callbacks = [
            Events(
                hparams["events_dir"],
                self.context.distributed.rank,
                float(hparams.get("seconds_per_batch", 0.0)),
                int(hparams.get("pause_at_batch", 0)),
                hparams.get("pause_during", {}),  # {"work": "validation" or "checkpoint", "batch": n}
            )
        ]
        if "stop_at_batch" in hparams:
            callbacks.append(StopAt(int(hparams["stop_at_batch"])))
        if "early_stopping" in hparams:
            callbacks.append(det.keras.callbacks.EarlyStopping(**hparams["early_stopping"]))
        if "reduce_lr" in hparams:
            callbacks.append(det.keras.callbacks.ReduceLROnPlateau(**hparams["reduce_lr"]))
        return callbacks
