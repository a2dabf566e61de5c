"""A linear regression trained with the new Keras API: the entrypoint_script of the tests' experiments.

Prints ``HISTORY <json>`` (what context.fit returned) from the chief.
"""

import json

import numpy as np
import tensorflow as tf

import det_estimator as det

RECORDS = 256
VALIDATION_RECORDS = 67  # uneven over two processes: 34 and 33


def data() -> tuple:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(RECORDS + VALIDATION_RECORDS, 3)).astype("float32")
    noise = 0.1 * rng.normal(size=(len(x), 1))
    y = (x @ np.array([[1.5], [-2.0], [0.5]]) + 0.3 + noise).astype("float32")
    return (x[:RECORDS], y[:RECORDS]), (x[RECORDS:], y[RECORDS:])


def build(learning_rate: float, wrap=lambda optimizer: optimizer) -> tf.keras.Model:
    """Zero initial weights: the same model whatever the seed."""
    model = tf.keras.Sequential(
        [tf.keras.Input((3,)), tf.keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros")]
    )
    optimizer = wrap(tf.keras.optimizers.SGD(learning_rate, momentum=0.5))
    model.compile(optimizer=optimizer, loss="mse", metrics=["mae"])
    return model


def main() -> None:
    context = det.keras.init()
    hparams = context.training.hparams
    (x, y), (x_val, y_val) = data()
    x, y = context.wrap_data(x, y)
    x_val, y_val = context.wrap_data(x_val, y_val)
    model = build(hparams["learning_rate"], context.wrap_optimizer)
    history = context.fit(
        model,
        x,
        y,
        batch_size=context.distributed.shard_batch_size(hparams["global_batch_size"]),
        shuffle=False,
        validation_data=(x_val, y_val),
        verbose=0,
    )
    if context.distributed.rank == 0 and history is not None:
        print("HISTORY " + json.dumps(history.history), flush=True)


if __name__ == "__main__":
    main()
