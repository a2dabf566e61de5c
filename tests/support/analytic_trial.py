"""A one-weight trial whose weight after every batch has a closed form.

The model is ``prediction = w * x`` with a mean squared error loss and plain gradient
descent, on 64 fixed records. With the records dealt round-robin to N processes, each
batching ``global_batch_size // N``, the averaged gradient of a step equals the
gradient of the one-process batch of ``global_batch_size`` records, so the trajectory
is the same on any number of processes: :func:`expected_weight` computes it.
"""

import json
import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from analytic_closed_form import (  # noqa: F401 -- re-exported: the tests read the closed form here
    FEATURES,
    NUM_RECORDS,
    SERVING_INPUT,
    TARGETS,
    expected_last_batch_means,
    expected_weight,
    expected_workload_losses,
    trajectory,
)

import det_estimator as det


def make_config(tmp_path, max_batches: int, **overrides) -> dict:
    config = {
        "entrypoint": "analytic_trial:AnalyticTrial",
        "name": "analytic",
        "hyperparameters": {"global_batch_size": 8, "learning_rate": 0.01, "events_dir": str(tmp_path / "events")},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": max_batches}},
        "scheduling_unit": 5,
        "min_validation_period": {"batches": 5},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        "reproducibility": {"experiment_seed": 1},
        # A failure ends the run at once; tests of automatic restarts set their own.
        "max_restarts": 0,
    }
    config.update(overrides)
    return config


class FailingReducer(det.MetricReducer):
    """A reducer whose accumulate raises on one rank (hyperparameter ``failing_reducer_rank``)."""

    def __init__(self, failing_rank: int, rank: int):
        self.failing_rank, self.rank = failing_rank, rank

    def accumulate(self, batch):
        if self.rank == self.failing_rank:
            raise ValueError(f"cannot score this batch on rank {self.rank}")
        return len(batch)

    def cross_slot_reduce(self, per_slot_metrics):
        return float(len(per_slot_metrics))


class SleepingReducer(det.MetricReducer):
    """A reducer whose cross-worker step never returns on one rank (hyperparameter ``sleeping_reducer_rank``).

    That rank adds the time it wedged to ``<events_dir>/wedged-rank<N>`` first, a line per run.
    """

    def __init__(self, sleeping_rank: int, rank: int, events_dir: str):
        self.sleeping_rank, self.rank, self.events_dir = sleeping_rank, rank, events_dir

    def accumulate(self, batch):
        return len(batch)

    def cross_slot_reduce(self, per_slot_metrics):
        if self.rank == self.sleeping_rank:
            with open(Path(self.events_dir, f"wedged-rank{self.rank}"), "a") as wedged:
                wedged.write(f"{time.time()}\n")
        while self.rank == self.sleeping_rank:
            time.sleep(1)  # wedged, as a reducer waiting on a lock or a server never answering is
        return float(len(per_slot_metrics))


class RecordingHook(det.RunHook):
    """Appends each RunHook call, with the rank, to a file per rank; writes a file into checkpoints."""

    def __init__(
        self,
        events_dir: str,
        rank: int,
        seconds_per_batch: float,
        crash_at_batch: int = 0,
        stop_at_batch: int = 0,
        resumed_at_full_speed: bool = False,
    ):
        os.makedirs(events_dir, exist_ok=True)
        self._log = os.path.join(events_dir, f"rank{rank}.jsonl")
        self._rank = rank
        self._seconds_per_batch = seconds_per_batch
        # A run resumed from a checkpoint need not wait for a pause: it trains at full speed.
        self._resumed_at_full_speed = resumed_at_full_speed
        self._resumed = False
        self._crash_at_batch = crash_at_batch
        self._stop_at_batch = stop_at_batch
        self._batches = 0

    def _record(self, event: str, **details) -> None:
        with open(self._log, "a") as log:
            log.write(json.dumps({"event": event, "rank": self._rank, **details}) + "\n")

    def after_run(self, run_context, run_values) -> None:
        if self._seconds_per_batch and not (self._resumed and self._resumed_at_full_speed):
            time.sleep(self._seconds_per_batch)  # gives a test time to interrupt the run
        self._batches += 1
        if self._batches == self._crash_at_batch:
            raise RuntimeError(f"rank {self._rank} crashed at its batch {self._batches} of this run")
        if self._stop_at_batch and self._batches >= self._stop_at_batch:
            run_context.request_stop()  # the trial decides it has trained enough

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "hook_note.txt"), "w") as note:
            note.write(f"written by rank {self._rank}")
        self._record("on_checkpoint_end")

    def on_checkpoint_load(self, checkpoint_dir: str) -> None:
        self._resumed = True
        with open(os.path.join(checkpoint_dir, "hook_note.txt")) as note:
            self._record("on_checkpoint_load", note=note.read())

    def on_trial_close(self) -> None:
        self._record("on_trial_close")


def tf_behaviour(events_dir) -> dict:
    """What each rank recorded of TensorFlow's behaviour when it built its estimator, by rank."""
    found = {}
    for path in sorted(Path(events_dir).glob("tf-behaviour-rank*.json")):
        found[path.stem.removeprefix("tf-behaviour-rank")] = json.loads(path.read_text())
    return found


class AnalyticTrial(det.EstimatorTrial):
    def build_estimator(self) -> tf.estimator.Estimator:
        events_dir = Path(self.context.get_hparam("events_dir"))
        events_dir.mkdir(parents=True, exist_ok=True)
        behaviour = {"resource_variables": tf.compat.v1.resource_variables_enabled()}
        (events_dir / f"tf-behaviour-rank{self.context.distributed.rank}.json").write_text(json.dumps(behaviour))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(self.context.get_hparam("learning_rate"))
        if self.context.get_hparams().get("adam"):  # an optimizer with slots, off the closed form
            optimizer = tf.compat.v1.train.AdamOptimizer(self.context.get_hparam("learning_rate"))
        if self.context.get_hparams().get("wrap_optimizer", True):
            optimizer = self.context.wrap_optimizer(optimizer)

        def model_fn(features, labels, mode):
            # With `random`, the weight starts from a seeded random value and the data is shuffled,
            # so that runs are reproducible only if the harness seeds everything.
            initializer = tf.compat.v1.random_normal_initializer() if self._random else tf.compat.v1.zeros_initializer()
            weight = tf.compat.v1.get_variable("w", shape=[], initializer=initializer)
            x = features["x"]
            if mode == tf.estimator.ModeKeys.TRAIN and self.context.get_hparams().get("noise"):
                x = self._noisy(x)
            slow = self.context.get_hparams().get("seconds_per_validation_batch")
            if mode == tf.estimator.ModeKeys.EVAL and slow:  # a long validation, step by step

                def sleep(value):
                    time.sleep(slow)
                    return value

                x = tf.compat.v1.py_func(sleep, [x], tf.float32, stateful=True)
                x.set_shape(features["x"].shape)
            predictions = weight * x
            if mode == tf.estimator.ModeKeys.PREDICT:
                return tf.estimator.EstimatorSpec(mode, predictions={"y": predictions})
            loss = tf.reduce_mean(tf.square(predictions - labels))
            tf.compat.v1.summary.scalar("mean_x", tf.reduce_mean(features["x"]))
            train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
            reported_weight = tf.identity(weight)
            nan_before = self.context.get_hparams().get("nan_weight_before")
            if nan_before is not None:  # an undefined metric at the first validations
                step = tf.compat.v1.train.get_global_step()
                reported_weight = tf.where(step < nan_before, tf.constant(np.nan, weight.dtype), weight)
            metrics = {
                "weight": (reported_weight, tf.no_op()),
                "mean_target": tf.compat.v1.metrics.mean(labels),
                "records": self.context.make_metric(features["x"], lambda b: sum(len(x) for x in b), np.int64),
            }
            failing_rank = self.context.get_hparams().get("failing_reducer_rank")
            if failing_rank is not None:
                reducer = FailingReducer(failing_rank, self.context.distributed.rank)
                metrics["flaky"] = self.context.experimental.make_metric(features["x"], reducer, np.float64)
            sleeping_rank = self.context.get_hparams().get("sleeping_reducer_rank")
            if sleeping_rank is not None:
                reducer = SleepingReducer(sleeping_rank, self.context.distributed.rank, str(events_dir))
                metrics["wedged"] = self.context.experimental.make_metric(features["x"], reducer, np.float64)
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)

        return tf.estimator.Estimator(model_fn)

    @staticmethod
    def _noisy(x: tf.Tensor) -> tf.Tensor:
        """x through dropout and every kind of random draw a resume must restore."""
        x = tf.compat.v1.layers.dropout(x, rate=0.25, training=True)  # Keras' dropout
        x = tf.nn.dropout(x, rate=0.25)
        x = x + 0.01 * tf.random.normal(tf.shape(x)) + 0.01 * tf.random.truncated_normal(tf.shape(x))
        return x + 0.01 * tf.cast(tf.random.uniform(tf.shape(x), 0, 3, dtype=tf.int32), tf.float32)

    @property
    def _random(self) -> bool:
        return bool(self.context.get_hparams().get("random", False))

    def _input_fn(self):
        if self.context.get_hparams().get("cached"):
            # The cache shuffles with the trial seed and shards; nothing else to do.
            return self._cached_records().batch(self.context.get_per_slot_batch_size())
        dataset = tf.data.Dataset.from_tensor_slices(({"x": FEATURES}, TARGETS))
        if self.context.get_hparams().get("wrap_dataset", True):
            dataset = self.context.wrap_dataset(dataset)
        if self._random:
            dataset = dataset.shuffle(NUM_RECORDS)
        return dataset.batch(self.context.get_per_slot_batch_size())

    def _cached_records(self):
        @self.context.experimental.cache_train_dataset("analytic", "v1", shuffle=True)
        def records():
            return tf.data.Dataset.from_tensor_slices(({"x": FEATURES}, TARGETS))

        return records()

    def build_train_spec(self) -> tf.estimator.TrainSpec:
        if self.context.get_hparams().get("fail_on_rank") == self.context.distributed.rank:
            raise RuntimeError(f"rank {self.context.distributed.rank} cannot build its input")
        hparams = self.context.get_hparams()
        crash = hparams.get("crash", {})  # {"rank": r, "batch": n}: that rank raises at its n-th batch of a run
        stop = hparams.get("stop", {})
        hook = RecordingHook(
            self.context.get_hparam("events_dir"),
            self.context.distributed.rank,
            float(hparams.get("seconds_per_batch", 0.0)),
            crash_at_batch=crash.get("batch", 0) if crash.get("rank") == self.context.distributed.rank else 0,
            stop_at_batch=int(hparams.get("stop_at_batch", 0))
            # {"rank": r, "batch": n}: only that rank's hook asks to stop, from its n-th batch of a run
            or (stop.get("batch", 0) if stop.get("rank") == self.context.distributed.rank else 0),
            resumed_at_full_speed=bool(hparams.get("resumed_at_full_speed", False)),
        )
        return tf.estimator.TrainSpec(self._input_fn, hooks=[hook])

    def build_validation_spec(self) -> tf.estimator.EvalSpec:
        records = self.context.get_hparams().get("validation_records")
        if records is None:
            return tf.estimator.EvalSpec(self._input_fn, steps=None)

        def first_records():
            dataset = tf.data.Dataset.from_tensor_slices(({"x": FEATURES[:records]}, TARGETS[:records]))
            return self.context.wrap_dataset(dataset).batch(self.context.get_per_slot_batch_size())

        return tf.estimator.EvalSpec(first_records, steps=None)

    def build_serving_input_receiver_fns(self):
        def raw_features():
            x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
            return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

        return {"raw": raw_features}
