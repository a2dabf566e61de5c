"""What an exact ``ReducerMetric(RocAuc())`` costs in ``model.evaluate``, against Keras' own AUC and no metric.

Evaluates the same model on the same ``--rows`` examples (1M by default, about 2%
positives, batches of ``--batch-size``) compiled three ways: with the loss only, with
``tf.keras.metrics.AUC(num_thresholds=200)``, and with
``det.keras.ReducerMetric(RocAuc())``. Prints each evaluation's time (the fastest and
the median of ``--repeats`` rounds, each round running every variant once in a new
random order, so that the machine's load hits all alike), each one's ratio to the
evaluation without a metric (of the medians, and the median of the per-round ratios),
and how far each AUC is from scikit-learn's on the scores ``predict`` gives (and the exact
one from scikit-learn's on the scores ``evaluate`` handed it).

Usage: ``.venv/bin/python benchmarks/keras_reducer_metric.py [--rows 1000000] [--repeats 11]``, on
either stack; ``benchmarks/stacks.py keras_reducer_metric`` runs it on both, side by side.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from stacks import Figure, write_figures  # noqa: E402

import det_estimator as det  # noqa: E402
from det_estimator.reducers import RocAuc  # noqa: E402

NUM_FEATURES = 16


def clicks(rows: int):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(rows, NUM_FEATURES)).astype(np.float32)
    logits = -4.5 + features[:, 0] + 0.5 * features[:, 1]
    labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return features, labels


def model(metrics: list) -> tf.keras.Model:
    built = tf.keras.Sequential(
        [
            tf.keras.Input((NUM_FEATURES,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    built.set_weights([np.random.default_rng(1).normal(0, 0.3, w.shape).astype(np.float32) for w in built.weights])
    built.compile("sgd", "binary_crossentropy", metrics=metrics)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description="Measures ReducerMetric(RocAuc()) in model.evaluate.")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--figures", help="also write the figures to this file (for benchmarks/stacks.py)")
    args = parser.parse_args()

    features, labels = clicks(args.rows)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(args.batch_size).cache()
    variants = {
        "no metric": model([]),
        "Keras AUC(num_thresholds=200)": model([tf.keras.metrics.AUC(num_thresholds=200, name="auc")]),
        "ReducerMetric(RocAuc())": model([det.keras.ReducerMetric(RocAuc(), name="auc")]),
    }
    for built in variants.values():  # traces the test step and fills the cache
        built.evaluate(dataset, verbose=0)
    seconds = {name: [] for name in variants}
    results = {}
    order = np.random.default_rng(0)
    for _ in range(args.repeats):
        for index in order.permutation(len(variants)):
            name, built = list(variants.items())[index]
            started = time.perf_counter()
            results[name] = built.evaluate(dataset, verbose=0, return_dict=True)
            seconds[name].append(time.perf_counter() - started)

    exact = roc_auc_score(labels, variants["no metric"].predict(dataset, verbose=0).ravel())
    # Keras 3's evaluate may compute a sigmoid an ULP apart from its predict, which splits tied
    # scores otherwise: the exact value is also checked on the very scores evaluate handed over.
    metric = variants["ReducerMetric(RocAuc())"].metrics[-1]
    metric = next(m for m in [metric, *getattr(metric, "metrics", [])] if isinstance(m, det.keras.ReducerMetric))
    received: dict = {"labels": [], "predictions": []}
    take = metric._queue.take

    def recording_take():
        blocks = take()
        for block in blocks:
            for key, rows in received.items():
                rows.append(block[key])
        return blocks

    metric._queue.take = recording_take
    on_received = variants["ReducerMetric(RocAuc())"].evaluate(dataset, verbose=0, return_dict=True)["auc"]
    on_received -= roc_auc_score(np.concatenate(received["labels"]), np.concatenate(received["predictions"]))
    base_fastest, base_median = min(seconds["no metric"]), statistics.median(seconds["no metric"])
    print(f"model.evaluate of {args.rows:,} examples in batches of {args.batch_size} ({args.repeats} rounds)")
    print(
        f"  {'metric':32s} {'fastest':>9s} {'median':>9s}   vs no metric (fastest, median, per-round median)"
        "   |AUC - sklearn|"
    )
    figures = []
    for name, times in seconds.items():
        fastest, median = min(times), statistics.median(times)
        per_round = statistics.median(t / base for t, base in zip(times, seconds["no metric"]))
        error = f"{abs(results[name]['auc'] - exact):.2e}" if "auc" in results[name] else "-"
        ratios = f"{fastest / base_fastest:6.2f}x  {median / base_median:6.2f}x  {per_round:6.2f}x"
        print(f"  {name:32s} {fastest:8.2f}s {median:8.2f}s   {ratios}                  {error}")
        figures.append(Figure(f"{name}, fastest", fastest, "s"))
        if name != "no metric":
            figures.append(Figure(f"{name} / no metric, fastest", fastest / base_fastest, "x"))
            figures.append(Figure(f"{name} / no metric, per-round median", per_round, "x"))
            figures.append(Figure(f"{name}: |AUC - sklearn|", abs(results[name]["auc"] - exact), ""))
    print(f"  ReducerMetric(RocAuc()) against scikit-learn on the scores evaluate gave it: {abs(on_received):.2e}")
    figures.append(Figure("ReducerMetric(RocAuc()) on evaluate's scores: |AUC - sklearn|", abs(on_received), ""))
    write_figures(args.figures, figures)


if __name__ == "__main__":
    main()
