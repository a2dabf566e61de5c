"""A TFKerasTrial written as the reference system's documentation writes one; only its import line was changed.

A small regression network on fixed synthetic data, whose hyperparameters and seed it
reads through ``context.env``, as the reference's own test trials do.
"""

import numpy as np
import tensorflow as tf

import det_estimator as det  # was: import determined as det

FEATURES = 4


def make_data(records: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(records, FEATURES)).astype(np.float32)
    y = (np.sin(x).sum(axis=1, keepdims=True) + 0.1 * rng.normal(size=(records, 1))).astype(np.float32)
    return x, y


class RegressionTrial(det.keras.TFKerasTrial):
    def __init__(self, context: det.keras.TFKerasTrialContext) -> None:
        self.context = context

    def build_model(self) -> tf.keras.Model:
        hparams = self.context.env.hparams
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(hparams["hidden_units"], activation="relu", input_shape=(FEATURES,)),
                tf.keras.layers.Dense(1),
            ]
        )
        model = self.context.wrap_model(model)
        optimizer = tf.keras.optimizers.SGD(learning_rate=hparams["learning_rate"], momentum=0.9)
        optimizer = self.context.wrap_optimizer(optimizer)
        model.compile(optimizer=optimizer, loss="mse", metrics=[tf.keras.metrics.MeanAbsoluteError(name="mae")])
        return model

    def build_training_data_loader(self):
        return make_data(64, seed=0)

    def build_validation_data_loader(self):
        return make_data(32, seed=1)
