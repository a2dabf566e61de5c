"""Digits with the new Keras API: a plain Keras script that runs by hand, as an experiment, on 1 or N processes.

Differences from the same script without det-estimator are marked "det-estimator:".
"""

from pathlib import Path

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import det_estimator as det

HERE = Path(__file__).resolve().parent
VALIDATION_RECORDS = 297  # of scikit-learn's 1797 digits; the other 1500 train


def load_data(seed: int = 0) -> tuple:
    """scikit-learn's 8x8 digits (shipped with it, nothing is downloaded), shuffled once, split in two."""
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    x = (digits.data[order] / 16.0).astype("float32")
    y = digits.target[order].astype("int64")
    return (x[VALIDATION_RECORDS:], y[VALIDATION_RECORDS:]), (x[:VALIDATION_RECORDS], y[:VALIDATION_RECORDS])


def build_model(hparams: dict) -> tf.keras.Model:
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(hparams["hidden"], activation="relu"),
            tf.keras.layers.Dropout(hparams["dropout"]),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )


def main() -> None:
    # det-estimator: seeds Python, NumPy and TensorFlow; by hand the run is recorded with const.yaml's
    # hyperparameters, in an experiment the trial's are used.
    context = det.keras.init(config=HERE / "const.yaml")
    hparams = context.training.hparams

    (x_train, y_train), (x_val, y_val) = load_data()
    # det-estimator: each process keeps its share of the data (a no-op on one process).
    x_train, y_train = context.wrap_data(x_train, y_train)
    x_val, y_val = context.wrap_data(x_val, y_val)

    model = build_model(hparams)
    optimizer = tf.keras.optimizers.SGD(hparams["learning_rate"], momentum=0.9)
    # det-estimator: the optimizer's state goes into checkpoints; on N processes gradients are averaged.
    optimizer = context.wrap_optimizer(optimizer)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])

    # det-estimator: the same global batch on any number of processes.
    batch_size = context.distributed.shard_batch_size(hparams["global_batch_size"])
    # det-estimator: epochs come from the searcher in an experiment (here: honoured by hand).
    history = context.fit(
        model,
        x=x_train,
        y=y_train,
        batch_size=batch_size,
        epochs=10,
        shuffle=False,
        validation_data=(x_val, y_val),
        verbose=2 if context.distributed.rank == 0 else 0,
    )
    if history is not None and history.history.get("val_loss") and context.distributed.rank == 0:
        last = {name: values[-1] for name, values in history.history.items()}
        print(f"validation loss {last['val_loss']:.4f}, accuracy {last['val_accuracy']:.4f}")


if __name__ == "__main__":
    main()
