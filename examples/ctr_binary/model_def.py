"""A click-through-rate model as an EstimatorTrial, with exact distributed ROC AUC.

Synthetic, imbalanced data (about 2% positives) stands in for click logs; it is
generated from a fixed logistic ground truth, so no download is needed. Every worker
trains on its round-robin share of the data with gradients averaged by Horovod, and
evaluates its share of the validation set; ROC AUC and average precision are reduced
over all workers' examples with det-estimator's reducers, so they are exact.
"""

import numpy as np
import tensorflow as tf

import det_estimator as det
from det_estimator.reducers import AveragePrecision, LogLoss, RocAuc

NUM_FEATURES = 16
# With these feature weights an intercept of -6 gives about 2% positives.
INTERCEPT = -6.0


def synthetic_clicks(num_rows: int, seed: int):
    """Features and click labels from a fixed logistic ground truth with a non-linear term."""
    weights = np.random.default_rng(0).normal(0.0, 0.6, NUM_FEATURES)
    rng = np.random.default_rng(seed)
    features = rng.normal(0.0, 1.0, (num_rows, NUM_FEATURES)).astype(np.float32)
    logits = INTERCEPT + features @ weights + 0.5 * features[:, 0] * features[:, 1]
    labels = (rng.random(num_rows) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return features, labels


class ClickThroughRateTrial(det.EstimatorTrial):
    """A two-layer DNN scoring click probability."""

    def __init__(self, context: det.EstimatorTrialContext):
        super().__init__(context)
        data = context.get_experiment_config()["data"]
        self.train_rows = synthetic_clicks(data["train_rows"], seed=1)
        self.validation_rows = synthetic_clicks(data["validation_rows"], seed=2)

    def build_estimator(self) -> tf.estimator.Estimator:
        optimizer = self.context.wrap_optimizer(
            tf.compat.v1.train.AdamOptimizer(self.context.get_hparam("learning_rate"))
        )
        hidden_units = self.context.get_hparam("hidden_units")
        make_metric = self.context.experimental.make_metric

        def model_fn(features, labels, mode):
            hidden = features["x"]
            for units in hidden_units:
                hidden = tf.compat.v1.layers.dense(hidden, units, activation=tf.nn.relu)
            logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1), axis=1)
            probability = tf.sigmoid(logits)
            if mode == tf.estimator.ModeKeys.PREDICT:
                return tf.estimator.EstimatorSpec(mode, predictions={"probability": probability})
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
            train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
            scored = {"labels": labels, "predictions": probability}
            metrics = {
                "auc": make_metric(scored, RocAuc(), np.float64),
                "average_precision": make_metric(scored, AveragePrecision(), np.float64),
                "log_loss": make_metric(scored, LogLoss(), np.float64),
            }
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)

        return tf.estimator.Estimator(model_fn)

    def _input_fn(self, rows, shuffle: bool):
        features, labels = rows

        def input_fn():
            dataset = self.context.wrap_dataset(tf.data.Dataset.from_tensor_slices(({"x": features}, labels)))
            if shuffle:
                dataset = dataset.shuffle(10_000)
            dataset = dataset.batch(self.context.get_per_slot_batch_size()).prefetch(2)
            # TensorFlow 2.15: closing a session waits for tf.data's autotuning thread to
            # wake by itself, seconds at random; fixed sizes (here, the prefetch) avoid it.
            options = tf.data.Options()
            options.autotune.enabled = False
            return dataset.with_options(options)

        return input_fn

    def build_train_spec(self) -> tf.estimator.TrainSpec:
        return tf.estimator.TrainSpec(self._input_fn(self.train_rows, shuffle=True))

    def build_validation_spec(self) -> tf.estimator.EvalSpec:
        return tf.estimator.EvalSpec(self._input_fn(self.validation_rows, shuffle=False), steps=None)

    def build_serving_input_receiver_fns(self):
        def raw_features():
            x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
            return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

        return {"raw": raw_features}
