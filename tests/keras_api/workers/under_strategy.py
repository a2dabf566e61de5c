"""det.keras.init() by hand under the TensorFlow launcher: what the workers of its strategy see.

Each process writes ``rank<N>.json`` into the directory named by ``OUT``: its place, the
strategy its model was built under, what ``context.evaluate`` and ``context.predict`` give
over the processes' shares, and what ``context.fit`` says of a Sequence.
"""

import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_estimator as det
from det_estimator.keras._api import FitError
from det_estimator.keras._engine import _keras_compat


def data() -> tuple[np.ndarray, np.ndarray]:
    """101 records (uneven over two processes) with 0/1 labels."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(101, 4)).astype("float32")
    return x, (x[:, :1] + 0.5 * rng.normal(size=(101, 1)) > 0).astype("float32")


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.Input((4,)),
            tf.keras.layers.Dense(
                1,
                activation="sigmoid",
                kernel_initializer=tf.keras.initializers.Constant([[0.9], [-0.2], [0.1], [0.4]]),
                bias_initializer=tf.keras.initializers.Constant(0.1),
            ),
        ]
    )
    return model


class Batches(tf.keras.utils.Sequence):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> tuple:
        x, y = data()
        return x[index * 10 : (index + 1) * 10], y[index * 10 : (index + 1) * 10]


def main() -> None:
    context = det.keras.init(config={"hyperparameters": {"global_batch_size": 20}})
    model = build_model()
    optimizer = tf.keras.optimizers.SGD(0.1)
    wrapped = context.wrap_optimizer(optimizer)
    model.compile(optimizer=wrapped, loss="binary_crossentropy", metrics=["accuracy", tf.keras.metrics.AUC(name="auc")])
    x, y = context.wrap_data(*data())
    evaluated = context.evaluate(model, x, y, batch_size=8, return_dict=True, verbose=0)
    predicted = context.predict(model, x, batch_size=8, verbose=0)
    try:
        context.fit(model, Batches(), epochs=1, verbose=0)
        refused = ""
    except FitError as error:
        refused = str(error)
    report = {
        "rank": context.distributed.rank,
        "size": context.distributed.size,
        "spans_processes": _keras_compat.strategy_spans_processes(model),
        "optimizer_as_given": wrapped is optimizer,
        "evaluated": {name: float(value) for name, value in evaluated.items()},
        "predicted": predicted.tolist(),
        "sequence_refused": refused,
    }
    Path(os.environ["OUT"], f"rank{context.distributed.rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
