"""A Keras script run by hand: ``--plain`` is plain Keras, otherwise the same with the new Keras API.

``--unshuffled`` trains on the records in their order (``shuffle=False``).
Prints ``RESULT <json>``: the history, the epochs trained and the final weights.
``--pause-at=N`` (or ``BY_HAND_PAUSE_AT=N``, which a later ``experiment resume`` does not
see when it is left out of that command's environment) sends the process SIGINT (Ctrl-C)
after N batches.
"""

import json
import os
import signal
import sys

import numpy as np
import tensorflow as tf


def data() -> tuple:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 5)).astype("float32")
    y = (x[:, :1] * 2.0 - x[:, 1:2] + 0.1 * rng.normal(size=(200, 1))).astype("float32")
    return (x[:160], y[:160]), (x[160:], y[160:])


def build() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.Input((5,)),
            tf.keras.layers.Dense(8, activation="tanh"),
            tf.keras.layers.Dropout(0.2),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model


class CtrlCAt(tf.keras.callbacks.Callback):
    def __init__(self, batches: int) -> None:
        super().__init__()
        self.at, self.count = batches, 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1
        if self.count == self.at:
            os.kill(os.getpid(), signal.SIGINT)


def main(plain: bool, pause_at: int, shuffle: bool = True) -> None:
    (x, y), validation = data()
    arguments = dict(batch_size=16, epochs=3, initial_epoch=1, validation_data=validation, shuffle=shuffle, verbose=0)
    if plain:
        tf.keras.utils.set_random_seed(0)
        # As det.keras.init() does: dropout draws from generators, whose states a checkpoint holds
        # (Keras 3 layers always do).
        if hasattr(tf.keras.backend, "experimental"):
            tf.keras.backend.experimental.enable_tf_random_generator()
        model = build()
        history = model.fit(x, y, **arguments)
    else:
        import det_estimator as det

        context = det.keras.init()
        x, y = context.wrap_data(x, y)
        model = build()
        callbacks = [CtrlCAt(pause_at)] if pause_at else []
        history = context.fit(model, x, y, callbacks=callbacks, **arguments)
    result = {"history": history.history, "epoch": history.epoch, "weights": [w.tolist() for w in model.get_weights()]}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    pause_at = [int(arg.split("=")[1]) for arg in sys.argv if arg.startswith("--pause-at=")]
    pause_at = pause_at or [int(os.environ.get("BY_HAND_PAUSE_AT", "0"))]
    main(plain="--plain" in sys.argv, pause_at=pause_at[0], shuffle="--unshuffled" not in sys.argv)
