"""Speed, exactness and traffic of det-estimator's reducers, side by side in one run.

Prints four tables:

1. ``RocAuc`` against ``sklearn.metrics.roc_auc_score`` at 1e6 and 1e7 examples: time,
   speed ratio and the largest difference of the values.
2. ``BinnedRocAuc`` against the exact AUC on scores peaked near 0 (2% positives): error,
   the bound it reports, and time; with Keras' default of 200 uniform thresholds beside it.
3. ``estimator.evaluate`` on 1M examples (batch 1024, a small model): no custom metric,
   ``make_metric(RocAuc)`` and ``tf.compat.v1.metrics.auc``, interleaved over repeats; the
   fastest run of each (the least disturbed) and the median.
4. Bytes one rank sends for each reducer's state at 1M examples.

Usage: ``.venv/bin/python benchmarks/reducers.py [--quick]`` (``--quick``: smaller sizes,
for checking that the script runs). The machine may be shared and noisy: every figure is
the median of several repeats (table 3 also shows the fastest), and comparisons are made
within one run.
"""

import argparse
import os
import pickle
import statistics
import tempfile
import time
import warnings
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from det_estimator import reducers  # noqa: E402
from det_estimator.reducers import RocAuc  # noqa: E402


def median_seconds(function: Callable[[], object], repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def reduce_once(reducer: reducers.MetricReducer, batch: dict[str, np.ndarray]):
    """Accumulates one batch on a fresh copy of ``reducer`` and reduces it."""
    fresh = pickle.loads(pickle.dumps(reducer))
    return fresh.cross_slot_reduce([fresh.accumulate(batch)])


def ctr_scores(num_examples: int, positive_rate: float, seed: int = 0):
    """float32 sigmoid scores peaked near 0, as a click-through-rate model produces."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(num_examples) < positive_rate).astype(np.int64)
    logits = rng.normal(-4.5, 1.0, num_examples) + 1.5 * labels
    scores = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return labels, scores


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    print(f"\n{title}")
    for row in [header, *rows]:
        print("  " + "  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)))


def accumulate_in_batches(reducer: reducers.MetricReducer, labels, scores, batch_size: int = 1024):
    """What an evaluation does: one accumulate() per batch; returns the final state."""
    state = None
    for start in range(0, len(labels), batch_size):
        state = reducer.accumulate(
            {"labels": labels[start : start + batch_size], "predictions": scores[start : start + batch_size]}
        )
    return state


def exact_auc_against_sklearn(sizes: list[int], repeats: int) -> None:
    rows = []
    for size in sizes:
        for positive_rate in (0.02, 0.5):
            labels, scores = ctr_scores(size, positive_rate)
            accumulate_seconds = median_seconds(
                lambda y=labels, s=scores: accumulate_in_batches(RocAuc(), y, s), repeats
            )
            reducer = reducers.RocAuc()
            state = accumulate_in_batches(reducer, labels, scores)
            ours = reducer.cross_slot_reduce([state])
            reduce_seconds = median_seconds(lambda r=reducer, st=state: r.cross_slot_reduce([st]), repeats)
            theirs = roc_auc_score(labels, scores)
            theirs_seconds = median_seconds(lambda y=labels, s=scores: roc_auc_score(y, s), repeats)
            rows.append(
                [
                    f"{size:.0e}",
                    f"{positive_rate:.0%}",
                    f"{theirs_seconds:.3f}",
                    f"{reduce_seconds:.3f}",
                    f"{theirs_seconds / reduce_seconds:.1f}x",
                    f"{accumulate_seconds:.3f}",
                    f"{theirs_seconds / (accumulate_seconds + reduce_seconds):.1f}x",
                    f"{abs(ours - theirs):.1e}",
                ]
            )
    table(
        "1. Exact ROC AUC: RocAuc against sklearn roc_auc_score (target >= 8x, <= 1e-12). accumulate() runs "
        "once per batch of 1024 during evaluation; cross_slot_reduce() once at its end",
        ["examples", "pos", "sklearn s", "reduce s", "speed-up", "accum. s", "incl. accum.", "|difference|"],
        rows,
    )


def binned_auc_against_exact(size: int, repeats: int) -> None:
    labels, scores = ctr_scores(size, 0.02)
    batch = {"labels": labels, "predictions": scores}
    exact = reduce_once(reducers.RocAuc(), batch)
    exact_seconds = median_seconds(lambda: reduce_once(reducers.RocAuc(), batch), repeats)
    candidates = {
        "BinnedRocAuc(bins=1024)": reducers.BinnedRocAuc(bins=1024),
        "BinnedRocAuc(bins=4096)": reducers.BinnedRocAuc(bins=4096),
        "200 uniform thresholds (Keras default)": reducers.BinnedRocAuc(bins=np.linspace(0.0, 1.0, 201)),
    }
    rows = [["RocAuc (exact)", f"{exact:.8f}", "0", "0", f"{exact_seconds:.3f}"]]
    for name, reducer in candidates.items():
        state = reducer.accumulate(batch)
        value, bound = reducer.cross_slot_reduce([state]), reducer.error_bound([state])
        seconds = median_seconds(lambda reducer=reducer: reduce_once(reducer, batch), repeats)
        rows.append([name, f"{value:.8f}", f"{abs(value - exact):.1e}", f"{bound:.1e}", f"{seconds:.3f}"])
    table(
        f"2. Binned ROC AUC against exact, {size:.0e} float32 scores peaked near 0, 2% positives (target <= 1e-5)",
        ["reducer", "AUC", "|error|", "reported bound", "seconds"],
        rows,
    )


def state_bytes(size: int) -> None:
    labels, scores = ctr_scores(size, 0.02)
    rng = np.random.default_rng(1)
    multiclass = {"labels": rng.integers(0, 10, size), "predictions": rng.integers(0, 10, size)}
    binary = {"labels": labels, "predictions": scores}
    candidates = {
        "RocAuc": (reducers.RocAuc(), binary),
        "AveragePrecision": (reducers.AveragePrecision(), binary),
        "BinnedRocAuc(bins=4096)": (reducers.BinnedRocAuc(bins=4096), binary),
        "F1(num_classes=10, macro)": (reducers.F1(num_classes=10, average="macro"), multiclass),
        "Accuracy": (reducers.Accuracy(), binary),
        "LogLoss": (reducers.LogLoss(), binary),
        "MeanSquaredError": (reducers.MeanSquaredError(), binary),
        "Mean": (reducers.Mean(), scores),
    }
    rows = []
    for name, (reducer, batch) in candidates.items():
        state = reducer.accumulate(batch)
        sent = len(pickle.dumps(("state", state), protocol=pickle.HIGHEST_PROTOCOL))
        rows.append([name, f"{sent:,}", f"{sent / size:.3f}"])
    table(f"4. Bytes one rank sends for its state, {size:.0e} examples", ["reducer", "bytes", "per example"], rows)


def evaluate_overhead(num_examples: int, repeats: int) -> None:
    import tensorflow as tf

    from det_estimator.reducers import make_metric

    # Keep the tables readable: TensorFlow's deprecation notices say nothing about speed.
    tf.get_logger().setLevel("ERROR")
    warnings.filterwarnings("ignore", message=r".*is deprecated")

    labels, _ = ctr_scores(num_examples, 0.02)
    features = np.random.default_rng(2).normal(size=(num_examples, 8)).astype(np.float32)

    def model_fn(features, labels, mode, params):
        hidden = tf.compat.v1.layers.dense(features, 16, activation=tf.nn.relu)
        logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1), axis=1)
        probabilities = tf.sigmoid(logits)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        if mode == tf.estimator.ModeKeys.TRAIN:
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=tf.compat.v1.train.get_global_step()
            )
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
        metrics = {}
        if params["metric"] == "make_metric(RocAuc)":
            metrics["auc"] = make_metric(
                {"labels": labels, "predictions": probabilities}, reducers.RocAuc(), np.float64
            )
        elif params["metric"] == "tf.compat.v1.metrics.auc":
            metrics["auc"] = tf.compat.v1.metrics.auc(labels, probabilities)
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)

    def input_fn():
        return tf.data.Dataset.from_tensor_slices((features, labels.astype(np.float32))).batch(1024)

    model_dir = tempfile.mkdtemp(prefix="bench_eval_")
    variants = ["no custom metric", "make_metric(RocAuc)", "tf.compat.v1.metrics.auc"]
    estimators = {
        name: tf.estimator.Estimator(model_fn, model_dir=model_dir, params={"metric": name}) for name in variants
    }
    estimators[variants[0]].train(lambda: input_fn().repeat(), steps=20)
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):  # interleaved, so drifting machine load hits every variant alike
        for name in variants:
            start = time.perf_counter()
            estimators[name].evaluate(input_fn)
            timings[name].append(time.perf_counter() - start)
    # The fastest run is the one least disturbed by other work on the machine; the median
    # shows how much disturbance there was.
    baseline_median = statistics.median(timings[variants[0]])
    baseline_best = min(timings[variants[0]])
    rows = []
    for name in variants:
        median, best = statistics.median(timings[name]), min(timings[name])
        rows.append(
            [
                name,
                f"{best:.2f}",
                f"{best / baseline_best - 1:+.1%}",
                f"{median:.2f}",
                f"{median / baseline_median - 1:+.1%}",
            ]
        )
    table(
        f"3. estimator.evaluate, {num_examples:.0e} examples, batch 1024, {repeats} interleaved runs "
        "(target: make_metric <= +10%)",
        ["metric", "best s", "vs none", "median s", "vs none"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmarks det-estimator's reducers.")
    parser.add_argument("--quick", action="store_true", help="small sizes, to check that the script runs")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [1_000_000, 10_000_000]
    repeats = 1 if args.quick else 5
    exact_auc_against_sklearn(sizes, repeats)
    binned_auc_against_exact(sizes[0], repeats)
    evaluate_overhead(sizes[0] // 10 if args.quick else 1_000_000, 1 if args.quick else 7)
    state_bytes(sizes[0])


if __name__ == "__main__":
    main()
