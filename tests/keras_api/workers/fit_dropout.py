"""Dropout on shares of uneven size, trained with the new Keras API: the entrypoint_script of a resume test.

``DROPOUT_PAUSE_AT``: the chief sends itself SIGTERM (a pause) after that many batches,
once (``DROPOUT_MARKER`` records that it did). ``DROPOUT_OUT``: the chief writes the final
weights there as .npy.
"""

import os
import signal
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_estimator as det

# 66 and 65 records on two processes: in batches of 4, each epoch's last batch holds 2 on
# one and 1 on the other, so their dropout layers draw different amounts.
RECORDS, VALIDATION_RECORDS = 131, 16


class PauseAt(tf.keras.callbacks.Callback):
    def __init__(self, batches: int, marker: Path) -> None:
        super().__init__()
        self.at, self.marker = batches, marker

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.at and not self.marker.exists():
            self.marker.write_text(str(self.at))
            os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    context = det.keras.init()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(RECORDS + VALIDATION_RECORDS, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [1.5]]) + 0.1).astype("float32")
    x_train, y_train = context.wrap_data(x[:RECORDS], y[:RECORDS])
    x_val, y_val = context.wrap_data(x[RECORDS:], y[RECORDS:])
    model = tf.keras.Sequential(
        [
            tf.keras.Input((4,)),
            tf.keras.layers.Dropout(0.5),
            tf.keras.layers.Dense(1, kernel_initializer="zeros"),
        ]
    )
    model.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.SGD(0.05)), loss="mse")
    callbacks = []
    if context.distributed.rank == 0 and os.environ.get("DROPOUT_PAUSE_AT"):
        callbacks.append(PauseAt(int(os.environ["DROPOUT_PAUSE_AT"]), Path(os.environ["DROPOUT_MARKER"])))
    context.fit(
        model,
        x_train,
        y_train,
        batch_size=context.distributed.shard_batch_size(8),
        shuffle=False,
        validation_data=(x_val, y_val),
        callbacks=callbacks,
        verbose=0,
    )
    if context.distributed.rank == 0:
        np.save(os.environ["DROPOUT_OUT"], np.concatenate([w.numpy().ravel() for w in model.weights]))


if __name__ == "__main__":
    main()
