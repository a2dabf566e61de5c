"""Example 1's click-through-rate model as a TFKerasTrial, with exact distributed ROC AUC in Keras.

Synthetic, imbalanced click logs (about 2% positives) from a fixed logistic ground
truth, so nothing is downloaded. The data is NumPy arrays: the harness batches them,
gives each process its share of every global batch and of the validation set, and
resumes at the batch where a trial stopped. ROC AUC, average precision and log loss
are ``det.keras.ReducerMetric`` metrics (ctr_binary's ``make_metric`` metrics),
computed over every process's validation examples, so they equal scikit-learn's;
Keras' own binned AUC is reported beside them for comparison.
"""

import numpy as np
import tensorflow as tf

import det_estimator as det
from det_estimator.reducers import AveragePrecision, LogLoss, RocAuc

NUM_FEATURES = 16
# With these feature weights an intercept of -6 gives about 2% positives.
INTERCEPT = -6.0


def synthetic_clicks(num_rows: int, seed: int):
    """Features and click labels from a fixed logistic ground truth with a non-linear term (as in ctr_binary)."""
    weights = np.random.default_rng(0).normal(0.0, 0.6, NUM_FEATURES)
    rng = np.random.default_rng(seed)
    features = rng.normal(0.0, 1.0, (num_rows, NUM_FEATURES)).astype(np.float32)
    logits = INTERCEPT + features @ weights + 0.5 * features[:, 0] * features[:, 1]
    labels = (rng.random(num_rows) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return features, labels


class ClickThroughRateTrial(det.keras.TFKerasTrial):
    """A two-layer DNN scoring click probability."""

    def __init__(self, context: det.keras.TFKerasTrialContext):
        super().__init__(context)
        data = context.get_data_config()
        self.train_rows = synthetic_clicks(data["train_rows"], seed=1)
        self.validation_rows = synthetic_clicks(data["validation_rows"], seed=2)

    def build_model(self) -> tf.keras.Model:
        inputs = tf.keras.Input(shape=(NUM_FEATURES,), name="x")
        hidden = inputs
        for units in self.context.get_hparam("hidden_units"):
            hidden = tf.keras.layers.Dense(units, activation="relu")(hidden)
        probability = tf.keras.layers.Dense(1, activation="sigmoid", name="probability")(hidden)
        model = self.context.wrap_model(tf.keras.Model(inputs, probability))
        optimizer = self.context.wrap_optimizer(tf.keras.optimizers.Adam(self.context.get_hparam("learning_rate")))
        model.compile(
            optimizer,
            loss="binary_crossentropy",
            metrics=[
                det.keras.ReducerMetric(RocAuc(), name="auc"),  # exact, over every process's examples
                det.keras.ReducerMetric(AveragePrecision(), name="average_precision"),
                det.keras.ReducerMetric(LogLoss(), name="log_loss"),  # over all examples, as ctr_binary's
                tf.keras.metrics.AUC(num_thresholds=200, name="binned_auc"),  # Keras' own, for comparison
            ],
        )
        return model

    def build_training_data_loader(self):
        return self.train_rows  # (x, y): batched, sharded and shuffled every epoch by the harness

    def build_validation_data_loader(self):
        return self.validation_rows

    def keras_callbacks(self):
        return [
            det.keras.callbacks.EarlyStopping(monitor="val_auc", mode="max", patience=3, min_delta=1e-4),
            det.keras.callbacks.TensorBoard(),
        ]
