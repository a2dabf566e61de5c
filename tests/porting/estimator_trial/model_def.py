"""A linear-regression EstimatorTrial written as the reference's documentation shows it.

Ported by changing its import line only (it was ``import determined as det``). It has a
``RunHook`` that keeps a batch count in every checkpoint and restores it on a resume, a
``MetricReducer`` and a reducer function through ``context.experimental.make_metric``, and
a serving input receiver function, whose SavedModel the reference's loader reads.
"""

import os
import time

import numpy as np
import tensorflow as tf

import det_estimator as det

NUM_RECORDS = 64
FEATURES = np.linspace(-1.0, 1.0, NUM_RECORDS, dtype=np.float32)
LABELS = (3.0 * FEATURES + 0.5).astype(np.float32)


class MyAvgMetricReducer(det.estimator.MetricReducer):
    """The documentation's distributed mean: per-slot sums and counts, reduced once."""

    def __init__(self):
        self.sum = 0.0
        self.counts = 0

    def accumulate(self, metric):
        self.sum += float(np.sum(metric))
        self.counts += len(metric)
        return self.sum, self.counts

    def cross_slot_reduce(self, per_slot_metrics):
        sums, counts = zip(*per_slot_metrics)
        return np.float32(sum(sums) / sum(counts))


def label_sum(all_batch_metrics):
    """A reducer function: every batch's values at once."""
    return np.float32(np.sum(np.hstack(all_batch_metrics)))


class BatchCounter(det.estimator.RunHook):
    """Counts the batches trained; the count goes into every checkpoint and comes back with it."""

    def __init__(self, seconds_per_batch: float):
        self.batches = 0
        self._seconds_per_batch = seconds_per_batch

    def after_run(self, run_context, run_values):
        self.batches += 1
        time.sleep(self._seconds_per_batch)  # gives a test the time to pause the run

    def on_checkpoint_end(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "batches.txt"), "w") as file:
            file.write(str(self.batches))

    def on_checkpoint_load(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "batches.txt")) as file:
            self.batches = int(file.read())


class LinearTrial(det.estimator.EstimatorTrial):
    def __init__(self, context):
        self.context = context
        self.counter = BatchCounter(context.get_hparam("seconds_per_batch"))

    def build_estimator(self):
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(self.context.get_hparam("learning_rate"))
        optimizer = self.context.wrap_optimizer(optimizer)

        def model_fn(features, labels, mode):
            weight = tf.compat.v1.get_variable("weight", shape=[], initializer=tf.compat.v1.zeros_initializer())
            bias = tf.compat.v1.get_variable("bias", shape=[], initializer=tf.compat.v1.zeros_initializer())
            predictions = weight * features["x"] + bias
            if mode == tf.estimator.ModeKeys.PREDICT:
                return tf.estimator.EstimatorSpec(mode, predictions={"y": predictions})
            loss = tf.reduce_mean(tf.square(predictions - labels))
            train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
            experimental = self.context.experimental
            eval_metric_ops = {
                "avg_prediction": experimental.make_metric(predictions, MyAvgMetricReducer(), np.float32),
                "label_sum": experimental.make_metric(labels, label_sum, np.float32),
                "weight": (tf.identity(weight), tf.no_op()),
                "bias": (tf.identity(bias), tf.no_op()),
            }
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=eval_metric_ops)

        return tf.estimator.Estimator(model_fn)

    def _input_fn(self):
        dataset = tf.data.Dataset.from_tensor_slices(({"x": FEATURES}, LABELS))
        dataset = self.context.wrap_dataset(dataset)
        return dataset.batch(self.context.get_per_slot_batch_size())

    def build_train_spec(self):
        return tf.estimator.TrainSpec(self._input_fn, hooks=[self.counter])

    def build_validation_spec(self):
        return tf.estimator.EvalSpec(self._input_fn, steps=None)

    def build_serving_input_receiver_fns(self):
        def raw_features():
            x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
            return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

        return {"inference": raw_features}
