"""Evaluates a fixed Keras model with ReducerMetric metrics in plain model.evaluate, on every rank's uneven share.

Run as plain ``python`` it is one process; under ``horovodrun`` (horovod.tensorflow
initialized) every rank evaluates its own contiguous, uneven share of the same rows.
Each rank writes ``rank<N>.json`` with its results, or the error evaluate raised.
The data is a pure function of ``--rows`` (see :func:`make_data`), so the test computes
the expected values with scikit-learn.
"""

import argparse
import json
import os
import traceback

import numpy as np
import tensorflow as tf

from det_estimator import _horovod
from det_estimator.keras import ReducerMetric
from det_estimator.reducers import AveragePrecision, RocAuc

WEIGHTS = np.array([[1.0], [0.5], [-0.25], [0.0]], np.float32)


def make_data(rows: int):
    """Features, binary labels (about 20% positives) and scores rounded to create ties."""
    rng = np.random.default_rng(rows)
    x = np.round(rng.normal(size=(rows, 4)), 1).astype(np.float32)
    y = (x[:, 0] + rng.normal(size=rows) > 1.0).astype(np.float32)
    return x, y


def scores(x: np.ndarray) -> np.ndarray:
    """What the model predicts, as the test computes it."""
    return model()(x).numpy().ravel()


def model() -> tf.keras.Model:
    built = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    built.layers[0].set_weights([WEIGHTS, np.zeros(1, np.float32)])
    return built


def share(rows: int, rank: int, size: int, split: str) -> slice:
    """Rank 0 takes 70% of the rows (all of them with ``all_on_rank0``), the others the rest."""
    if size == 1:
        return slice(0, rows)
    cut = rows if split == "all_on_rank0" else int(rows * 0.7)
    return slice(0, cut) if rank == 0 else slice(cut, rows)


def evaluate(evaluated: tf.keras.Model, x: np.ndarray, y: np.ndarray) -> dict:
    """model.evaluate's results; a rank without rows still evaluates, and takes part in the exchange.

    Keras refuses empty arrays, so such a rank evaluates an empty dataset of unknown
    length, and reads the metrics from the model (evaluate returns no logs for no batch).
    """
    if len(x):
        return evaluated.evaluate(x, y, batch_size=64, verbose=0, return_dict=True)
    empty = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).filter(lambda *batch: True)
    evaluated.evaluate(empty, verbose=0)
    return {name: float(value) for name, value in evaluated.get_metrics_result().items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--rows", type=int, default=3001)
    parser.add_argument("--split", choices=["uneven", "all_on_rank0"], default="uneven")
    args = parser.parse_args()

    if "HOROVOD_RANK" in os.environ:
        _horovod.init()
    rank, size = _horovod.rank(), _horovod.size()
    x, y = make_data(args.rows)
    rows = share(args.rows, rank, size, args.split)
    evaluated = model()
    evaluated.compile(
        "sgd",
        "binary_crossentropy",
        metrics=[
            ReducerMetric(RocAuc(), name="auc"),
            ReducerMetric(AveragePrecision(), name="average_precision"),
            tf.keras.metrics.AUC(name="keras_auc"),
        ],
    )
    report = {"rank": rank, "size": size, "rows": rows.stop - rows.start}
    try:
        # Twice: the second evaluation must start from a fresh state.
        report["evaluations"] = [evaluate(evaluated, x[rows], y[rows]) for _ in range(2)]
    except Exception:
        report["error"] = traceback.format_exc()
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()
