"""Speed, exactness and traffic of det-estimator's reducers, side by side in one run.

Prints four tables:

1. ``RocAuc`` and ``AveragePrecision`` fed batch by batch (1024 examples per
   ``accumulate``), then reduced, against scikit-learn on the whole arrays, against a
   float32 ``np.sort`` of the same scores and against themselves without their native
   kernels (NumPy only), at 1e6 and 1e7 examples, 2% and 50% positives; the largest
   difference to scikit-learn, and the bytes a worker's state takes.
2. ``BinnedRocAuc`` at its default size against the exact AUC on 20 random draws each of
   200k click-through scores (2% positives) and of a balanced case (50%): largest error,
   largest bound, and the ratio bound / error; beside it, the former default (4096 bins
   uniform in logit space) and Keras' 200 uniform thresholds, as explicit edges, and the
   default cells split over 2 and over 4 workers (round-robin).
3. ``estimator.evaluate`` on 1M examples (batch 1024, a small model): no custom metric, a
   per-batch ``py_func`` that does nothing (the bare cost of calling Python per batch),
   ``make_metric(RocAuc)``, ``make_metric`` of a function calling scikit-learn, and
   ``tf.compat.v1.metrics.auc``, interleaved over 21 rounds: the median run of each, the
   median of the per-round ratios to the plain evaluate with its 95% interval, and the
   median step (a batch), which bursts of load on the machine barely move, and the time
   outside the steps (graph, restore, final reduction) against the plain run's, and two parts
   of it, the session's creation (restoring the checkpoint) and the final ops (every metric's
   value, the exact reduction among them) with the session's closing; then the bare
   cost of calling that function once on the very values the evaluations gave it. The
   process's CPU time is not shown: TensorFlow's idle pool threads spin, and an extra op
   handed to another thread adds up to a fifth of a step's CPU time without any wall time.
4. Bytes one rank sends for each reducer's state at 1M examples.
5. The per-batch cost of ``RocAuc.accumulate`` and ``AveragePrecision.accumulate`` for
   batches of 1024 float32 scores with int64 and with float32 labels (goal: <= 2 us), and
   its CPU time in the process and in the kernel, and page faults, per batch: with the
   keys in arrays an earlier evaluation wrote (reused from the pool), and without the pool,
   as in a process's first evaluation: there, whether the memory is new to the process (a
   page fault per batch) depends on what the C allocator kept of earlier runs' memory.
6. Reducing N workers' states (N = 1, 2, 8, 32; uneven shares, each state pickled and
   unpickled as it travels) of 1e7 examples, 1e8 with ``--large``, on 2 threads: each N's
   median time and its ratio to N = 1, one state holding the same examples (goal: <= 1.2x);
   then the peak memory of a rank that receives 8 workers' states as one exchange's bytes
   and reduces them, in bytes per example.

Usage: ``.venv/bin/python benchmarks/reducers.py [--quick] [--large] [--only 1,2,3,4,5,6]``
(``--quick``: smaller sizes, for checking that the script runs). The machine may be
shared and noisy: variants are timed in alternation within one run, and medians are
reported.
"""

import argparse
import atexit
import contextlib
import functools
import math
import os
import pickle
import resource
import shutil
import statistics
import tempfile
import time
import tracemalloc
import warnings
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from sklearn.metrics import average_precision_score, roc_auc_score  # noqa: E402

from det_estimator import reducers  # noqa: E402
from det_estimator.reducers import _chunk_pool, _roc_auc  # noqa: E402
from det_estimator.reducers import _ranking as ranking  # noqa: E402


def seconds(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def ctr_scores(num_examples: int, positive_rate: float, seed: int = 0):
    """float32 sigmoid scores peaked near 0, as a click-through-rate model produces."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(num_examples) < positive_rate).astype(np.int64)
    logits = rng.normal(-4.5, 1.0, num_examples) + 1.5 * labels
    scores = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return labels, scores


def balanced_scores(num_examples: int, seed: int = 0):
    """float32 probabilities of a classifier with 50% positives."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(num_examples) < 0.5).astype(np.int64)
    logits = rng.normal(0.0, 1.0, num_examples) + labels
    return labels, (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)


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


@contextlib.contextmanager
def numpy_only():
    """The ranking reducers as a build without the native kernels runs them (NumPy alone)."""
    kernels, ranking.kernels = ranking.kernels, None
    try:
        yield
    finally:
        ranking.kernels = kernels


def accumulate_and_reduce(make_reducer: Callable[[], reducers.MetricReducer], labels, scores):
    """(accumulate seconds, reduce seconds, value, final state) of one evaluation."""
    reducer = make_reducer()
    start = time.perf_counter()
    state = accumulate_in_batches(reducer, labels, scores)
    accumulated = time.perf_counter()
    value = reducer.cross_slot_reduce([state])
    return accumulated - start, time.perf_counter() - accumulated, value, state


def exact_ranking_against_sklearn(sizes: list[int], repeats: int) -> None:
    cases = [
        ("RocAuc", reducers.RocAuc, roc_auc_score),
        ("AveragePrecision", reducers.AveragePrecision, average_precision_score),
    ]
    rows = []
    for size in sizes:
        for positive_rate in (0.02, 0.5):
            labels, scores = ctr_scores(size, positive_rate)
            for name, make_reducer, reference in cases:
                timings: dict[str, list[float]] = {
                    key: [] for key in ("sort", "sklearn", "accumulate", "reduce", "numpy")
                }
                for _ in range(repeats):  # interleaved, so drifting machine load hits every variant alike
                    timings["sort"].append(seconds(lambda s=scores: np.sort(s)))
                    timings["sklearn"].append(seconds(lambda f=reference, y=labels, s=scores: f(y, s)))
                    accumulate, reduce, ours, state = accumulate_and_reduce(make_reducer, labels, scores)
                    timings["accumulate"].append(accumulate)
                    timings["reduce"].append(reduce)
                    with numpy_only():
                        accumulate, reduce, numpy_value, _ = accumulate_and_reduce(make_reducer, labels, scores)
                    timings["numpy"].append(accumulate + reduce)
                state_bytes = len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
                median = {key: statistics.median(values) for key, values in timings.items()}
                total = median["accumulate"] + median["reduce"]
                expected = reference(labels, scores)
                rows.append(
                    [
                        f"{size:.0e}",
                        f"{positive_rate:.0%}",
                        name,
                        f"{median['sklearn']:.3f}",
                        f"{median['sort']:.3f}",
                        f"{median['accumulate']:.3f}",
                        f"{median['reduce']:.3f}",
                        f"{median['sklearn'] / total:.1f}x",
                        f"{total / median['sort']:.2f}",
                        f"{median['numpy']:.3f}",
                        f"{median['numpy'] / total:.1f}x",
                        f"{max(abs(ours - expected), abs(numpy_value - expected)):.1e}",
                        f"{state_bytes / size:.2f}",
                    ]
                )
    table(
        f"1. Exact ranking metrics, accumulate() per batch of 1024 then cross_slot_reduce(), against scikit-learn "
        f"and a float32 np.sort of the same scores (medians of {repeats} interleaved runs; goals: >= 15x sklearn, "
        "<= 3x np.sort, <= 1e-12, <= 4 bytes per example). NumPy only: the same reducer without its native "
        "kernels (a build without a C compiler); |difference| is the larger of both to scikit-learn",
        [
            "examples",
            "pos",
            "metric",
            "sklearn s",
            "np.sort s",
            "accum. s",
            "reduce s",
            "vs sklearn",
            "/ np.sort",
            "NumPy only s",
            "kernels gain",
            "|difference|",
            "bytes/example",
        ],
        rows,
    )


def logit_edges(bins: int = 4096, logit_range: float = 16.0) -> np.ndarray:
    """The former default bins: uniform in logit space, as probability edges."""
    return 1.0 / (1.0 + np.exp(-np.linspace(-logit_range, logit_range, bins - 1)))


def binned_over_draws(size: int, draws: int) -> None:
    candidates = {
        "BinnedRocAuc() (default: 4096 cells)": (lambda: reducers.BinnedRocAuc(), 1),
        "BinnedRocAuc(), 2 workers": (lambda: reducers.BinnedRocAuc(), 2),
        "BinnedRocAuc(), 4 workers": (lambda: reducers.BinnedRocAuc(), 4),
        "4096 uniform logit bins (former default)": (lambda: reducers.BinnedRocAuc(bins=logit_edges()), 1),
        "200 uniform thresholds (Keras default)": (lambda: reducers.BinnedRocAuc(bins=np.linspace(0, 1, 201)), 1),
    }
    rows = []
    cases = {"CTR 2%": lambda seed: ctr_scores(size, 0.02, seed), "50%": lambda seed: balanced_scores(size, seed)}
    for case, make_data in cases.items():
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in candidates}
        for draw in range(draws):
            labels, scores = make_data(draw)
            exact = roc_auc_score(labels, scores)
            for name, (make_reducer, workers) in candidates.items():
                start = time.perf_counter()
                states = [
                    accumulate_in_batches(make_reducer(), labels[worker::workers], scores[worker::workers])
                    for worker in range(workers)
                ]
                reducer = make_reducer()
                value = reducer.cross_slot_reduce(states)
                results[name].append((abs(value - exact), reducer.last_error_bound, time.perf_counter() - start))
        for name, values in results.items():
            errors, bounds, times = (np.array(column) for column in zip(*values))
            ratios = bounds / np.maximum(errors, 1e-300)
            rows.append(
                [
                    case,
                    name,
                    f"{errors.max():.1e}",
                    f"{np.median(errors):.1e}",
                    f"{bounds.max():.1e}",
                    f"{ratios.min():.0f}-{ratios.max():.0f}",
                    f"{np.median(times):.3f}",
                ]
            )
    table(
        f"2. Binned ROC AUC against exact, {draws} random draws of {size:.0e} float32 scores per case, batches of 1024 "
        "(goals: |error| <= 2e-6 and bound <= 10 x |error| on every draw)",
        ["case", "reducer", "max |error|", "median |error|", "max bound", "bound / error", "s per draw"],
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
        "BinnedRocAuc() (4096 cells)": (reducers.BinnedRocAuc(), binary),
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


def auc_of_batches(batches: list) -> float:
    """A function reducer, the reference's usual way: scikit-learn on all per-batch values."""
    return roc_auc_score(np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]))


def recording(function: Callable[[list], float], record: dict) -> Callable[[list], float]:
    """``function``, recording how long each call took, and its values when asked.

    The seconds go to ``record["seconds"]``; the values go to ``record["batches"]`` only
    while ``record["keep"]`` is true. Kept values held into the next evaluations slow them
    (by 0.02 s or more at 1M examples), so whoever keeps them drops them before the next
    one. A closure, not an object: make_metric deep-copies a function reducer's state,
    which leaves functions (and what they close over) as they are.
    """

    def recorded(batches: list) -> float:
        if record.get("keep"):
            record["batches"] = batches
        start = time.perf_counter()
        try:
            return function(batches)
        finally:
            record.setdefault("seconds", []).append(time.perf_counter() - start)

    return recorded


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of ``values``.

    The interval runs between two order statistics, chosen from the binomial distribution
    of how many values fall below the true median; it assumes nothing about the shape of
    the noise, which on a shared machine comes in bursts.
    """
    ordered = sorted(values)
    count = len(ordered)
    # k: the most values that may be cut off each end while the interval still holds the median
    # with the confidence asked, i.e. the largest k with P(Binomial(count, 1/2) < k) <= (1 - confidence) / 2.
    below, k = 0.0, 0
    while below + math.comb(count, k) / 2**count <= (1 - confidence) / 2:
        below += math.comb(count, k) / 2**count
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[count - k]


def evaluate_overhead(num_examples: int, rounds: int) -> None:
    import tensorflow as tf

    from det_estimator.reducers import make_metric

    # Keep the tables readable: TensorFlow's deprecation notices say nothing about speed.
    tf.get_logger().setLevel("ERROR")
    warnings.filterwarnings("ignore", message=r".*is deprecated")

    class StepTimes(tf.estimator.SessionRunHook):
        """The wall time of each evaluation step: their median shrugs off the bursts of load on a shared machine."""

        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._start = 0.0
            # When the session was being created (restoring the checkpoint), and when the steps ended:
            # the estimator runs the final ops (each metric's value) and closes the session after that.
            self.began = self.created = self.ended = 0.0

        def begin(self):
            self.began = time.perf_counter()

        def after_create_session(self, session, coord):
            self.created = time.perf_counter()

        def before_run(self, run_context):
            self._start = time.perf_counter()

        def after_run(self, run_context, run_values):
            self.seconds.append(time.perf_counter() - self._start)

        def end(self, session):
            self.ended = time.perf_counter()

    labels, _ = ctr_scores(num_examples, 0.02)
    features = np.random.default_rng(2).normal(size=(num_examples, 8)).astype(np.float32)
    record: dict = {}
    recording_function = recording(auc_of_batches, record)

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
        if params["metric"] == "per-batch py_func doing nothing":
            update = tf.compat.v1.py_func(lambda *arrays: np.int64(0), [labels, probabilities], tf.int64)
            metrics["nothing"] = (tf.constant(0.0), update)
        elif params["metric"] == "make_metric(RocAuc)":
            metrics["auc"] = make_metric(
                {"labels": labels, "predictions": probabilities}, reducers.RocAuc(), np.float64
            )
        elif params["metric"] == "make_metric(sklearn function)":
            metrics["auc"] = make_metric([labels, probabilities], recording_function, np.float64)
        elif params["metric"] == "tf.compat.v1.metrics.auc":
            metrics["auc"] = tf.compat.v1.metrics.auc(labels, probabilities)
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)

    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices((features, labels.astype(np.float32))).batch(1024)
        # Closing a session whose pipeline tf.data autotunes waits for the autotuning thread,
        # 0.2 to 1.3 s in a quarter of the runs here, whatever the metric: noise larger than
        # the cost measured. An explicit prefetch keeps the input overlapped with the model.
        options = tf.data.Options()
        options.autotune.enabled = False
        return dataset.prefetch(2).with_options(options)

    model_dir = tempfile.mkdtemp(prefix="bench_eval_")
    atexit.register(shutil.rmtree, model_dir, ignore_errors=True)
    variants = [
        "no custom metric",
        "per-batch py_func doing nothing",
        "make_metric(RocAuc)",
        "make_metric(sklearn function)",
        "tf.compat.v1.metrics.auc",
    ]
    estimators = {
        name: tf.estimator.Estimator(model_fn, model_dir=model_dir, params={"metric": name}) for name in variants
    }
    estimators[variants[0]].train(lambda: input_fn().repeat(), steps=20)
    for estimator in estimators.values():  # warm-up
        estimator.evaluate(input_fn, steps=5)
    record.clear()
    timings: dict[str, list[float]] = {name: [] for name in variants}
    steps: dict[str, list[float]] = {name: [] for name in variants}
    # Each run's time outside its steps: building the graph, restoring, the final reduction; and
    # two parts of it: the session's creation (restoring the checkpoint), and the final ops
    # (every metric's value) with the session's closing.
    outside: dict[str, list[float]] = {name: [] for name in variants}
    creation: dict[str, list[float]] = {name: [] for name in variants}
    final: dict[str, list[float]] = {name: [] for name in variants}
    # The function called once, bare, on the values the same round's evaluation handed it
    # (a model's scores tie more than random ones), right after that evaluation.
    bare: list[float] = []
    rng = np.random.default_rng(0)
    for _ in range(rounds):  # interleaved, in a new order each round, so machine load hits every variant alike
        for index in rng.permutation(len(variants)):
            name = variants[index]
            step_times = StepTimes()
            record["keep"] = name == "make_metric(sklearn function)"
            started = time.perf_counter()
            timings[name].append(seconds(functools.partial(estimators[name].evaluate, input_fn, hooks=[step_times])))
            steps[name].extend(step_times.seconds)
            outside[name].append(timings[name][-1] - sum(step_times.seconds))
            creation[name].append(step_times.created - step_times.began)
            final[name].append(started + timings[name][-1] - step_times.ended)
            if record["keep"]:
                # Popped, so that nothing keeps the values into the next evaluations.
                bare.append(seconds(functools.partial(auc_of_batches, record.pop("batches"))))
    plain = timings[variants[0]]
    plain_step = statistics.median(steps[variants[0]])
    rows = []
    for name in variants:
        ratios = [t / p - 1 for t, p in zip(timings[name], plain)]
        low, high = median_interval(ratios)
        step = statistics.median(steps[name])
        rows.append(
            [
                name,
                f"{statistics.median(timings[name]):.3f}",
                f"{statistics.median(timings[name]) / statistics.median(plain) - 1:+.1%}",
                f"{statistics.median(ratios):+.1%} [{low:+.1%}, {high:+.1%}]",
                f"{step * 1e6:.0f}",
                f"{(step - plain_step) * 1e6:+.1f} ({step / plain_step - 1:+.1%})",
                *(
                    f"{statistics.median(o - p for o, p in zip(part[name], part[variants[0]])) * 1e3:+.1f}"
                    for part in (outside, creation, final)
                ),
            ]
        )
    table(
        f"3. estimator.evaluate, {num_examples:.0e} examples, batch 1024, {rounds} interleaved rounds "
        "(goal: make_metric(RocAuc) <= +5% of the median wall time)",
        [
            "metric",
            "median s",
            "vs none",
            "per-round ratio: median [95% interval]",
            "median step us",
            "step vs none: us",
            "outside steps vs none: ms",
            "of which session creation",
            "final ops and close",
        ],
        rows,
    )

    # Each cost is the median over rounds of the difference to the plain evaluate of the
    # same round, so that load on the machine that changes between rounds cancels out.
    def cost(name: str) -> float:
        return statistics.median(t - p for t, p in zip(timings[name], plain))

    py_func_cost = cost("per-batch py_func doing nothing")
    function_cost = cost("make_metric(sklearn function)")
    # Per round: what the function reducer costs beyond the bare call and the per-batch py_func.
    excess = [
        f - b - n
        for f, b, n in zip(timings["make_metric(sklearn function)"], bare, timings["per-batch py_func doing nothing"])
    ]
    low, high = median_interval(excess)
    print(
        f"  function reducer: costs {function_cost:+.3f} s over the plain evaluate; calling the function once on "
        f"all values takes {statistics.median(bare):.3f} s and a per-batch py_func {py_func_cost:+.3f} s, together "
        f"{statistics.median(bare) + py_func_cost:.3f} s (goal: the first at most the sum)"
    )
    print(
        f"  per round, the function reducer's cost minus the bare call and the py_func's cost: median "
        f"{statistics.median(excess):+.3f} s [95% interval {low:+.3f}, {high:+.3f}]"
    )
    print(f"  the function itself took {statistics.median(record['seconds']):.3f} s (median) inside the evaluations")


@contextlib.contextmanager
def without_pool():
    """The ranking reducers' keys in arrays allocated for them, as in a process's first evaluation: no pooled ones."""
    pool, pool_bytes = _roc_auc.key_arrays, _chunk_pool._POOL_BYTES
    _roc_auc.key_arrays, _chunk_pool._POOL_BYTES = _chunk_pool._KeyArrayPool(), 0
    try:
        yield
    finally:
        _roc_auc.key_arrays, _chunk_pool._POOL_BYTES = pool, pool_bytes


def per_batch_accumulate(batches: int, repeats: int) -> None:
    rng = np.random.default_rng(3)
    scores = rng.random(1024, dtype=np.float32)
    int_labels = rng.integers(0, 2, 1024)
    cases = {
        (name, labels.dtype.name, memory): (reducer_type, {"labels": labels, "predictions": scores})
        for name, reducer_type in (("RocAuc", reducers.RocAuc), ("AveragePrecision", reducers.AveragePrecision))
        for labels in (int_labels, int_labels.astype(np.float32))
        for memory in ("pool", "no pool")
    }
    timings: dict[tuple[str, str, str], list[float]] = {case: [] for case in cases}
    # Per run and batch: CPU time in the process and in the kernel, and page faults. A batch's
    # keys are 4 KiB: in memory never written before, the kernel's time is mostly the page
    # fault that maps it.
    usage: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {case: [] for case in cases}
    for _ in range(repeats):  # interleaved
        for case, (reducer_type, batch) in cases.items():
            with without_pool() if case[2] == "no pool" else contextlib.nullcontext():
                reducer = reducer_type()
                reducer.accumulate(batch)
                before = resource.getrusage(resource.RUSAGE_SELF)
                start = time.perf_counter()
                for _ in range(batches):
                    reducer.accumulate(batch)
                timings[case].append((time.perf_counter() - start) / batches)
                after = resource.getrusage(resource.RUSAGE_SELF)
                del reducer
            usage[case].append(
                (
                    (after.ru_utime - before.ru_utime) / batches,
                    (after.ru_stime - before.ru_stime) / batches,
                    (after.ru_minflt - before.ru_minflt) / batches,
                )
            )
    rows = [
        [
            *case,
            f"{min(values) * 1e6:.2f}",
            f"{statistics.median(values) * 1e6:.2f}",
            *(f"{statistics.median(run[column] for run in usage[case]) * 1e6:.2f}" for column in (0, 1)),
            f"{statistics.median(run[2] for run in usage[case]):.2f}",
        ]
        for case, values in timings.items()
    ]
    table(
        f"5. accumulate() of a batch of 1024 float32 scores, {batches} batches per run, {repeats} interleaved runs "
        "(goal: <= 2 us); memory: pool, an evaluation's keys in arrays an earlier one wrote; no pool, in arrays "
        "allocated for it, as in a process's first evaluation (new to the process where there is a page fault "
        "per batch, else memory the C allocator kept)",
        ["reducer", "labels", "memory", "fastest us", "median us", "user CPU us", "kernel CPU us", "page faults"],
        rows,
    )


def worker_states(reducer_type: type, labels: np.ndarray, scores: np.ndarray, workers: int) -> list[bytes]:
    """Each of ``workers`` uneven, contiguous shares accumulated in batches of 1024, pickled as sent."""
    cuts = np.sort(np.random.default_rng(workers).integers(0, len(labels), workers - 1))
    bounds = [0, *cuts.tolist(), len(labels)]
    return [
        pickle.dumps(accumulate_in_batches(reducer_type(), labels[start:stop], scores[start:stop]))
        for start, stop in zip(bounds[:-1], bounds[1:])
        if stop > start
    ]


def reduction_of_many_states(num_examples: int, repeats: int) -> None:
    from det_estimator.reducers._accumulator import MetricAccumulator

    labels, scores = ctr_scores(num_examples, 0.02)
    labels = labels.astype(np.int8)
    counts = [1, 2, 8, 32]
    rows = []
    peak_line = ""
    for name, reducer_type in (("RocAuc", reducers.RocAuc), ("AveragePrecision", reducers.AveragePrecision)):
        sent = {workers: worker_states(reducer_type, labels, scores, workers) for workers in counts}
        timings: dict[int, list[float]] = {workers: [] for workers in counts}
        values: dict[int, float] = {}
        for _ in range(repeats):  # interleaved; fresh states each time, as a reduction sorts what it is given
            for workers in counts:
                states = [pickle.loads(state) for state in sent[workers]]
                start = time.perf_counter()
                values[workers] = reducer_type(num_threads=2).cross_slot_reduce(states)
                timings[workers].append(time.perf_counter() - start)
                del states
        one = statistics.median(timings[1])
        for workers in counts:
            median = statistics.median(timings[workers])
            rows.append(
                [
                    name,
                    f"{num_examples:.0e}",
                    str(workers),
                    f"{median:.3f}",
                    f"{median / one:.2f}x",
                    f"{statistics.median(t / base for t, base in zip(timings[workers], timings[1])):.2f}x",
                    f"{abs(values[workers] - values[1]):.1e}",
                ]
            )
        if reducer_type is reducers.RocAuc:
            # A rank's peak in the reduction of 8 workers' states: the exchange's bytes (each worker's envelope,
            # as MetricAccumulator.encode packs it, in one buffer as an allgather gives them) held throughout,
            # and the peak of what the reduction allocates on top (NumPy's arrays, which tracemalloc sees).
            envelopes = [pickle.dumps(("state", pickle.loads(state))) for state in sent[8]]
            sizes = np.array([len(envelope) for envelope in envelopes])
            exchanged = np.frombuffer(b"".join(envelopes), np.uint8)
            del envelopes
            tracemalloc.start()
            MetricAccumulator(reducers.RocAuc(num_threads=2), name="auc").reduce_encoded(exchanged, sizes)
            peak = exchanged.nbytes + tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            peak_line = (
                f"  peak memory of a rank reducing 8 workers' {num_examples:.0e} examples (RocAuc): "
                f"{peak / 2**20:,.0f} MiB, {peak / num_examples:.1f} bytes per example, of which the exchanged "
                f"states {exchanged.nbytes / num_examples:.2f}"
            )
            del exchanged
        del sent
    table(
        f"6. cross_slot_reduce of N workers' states (uneven shares, unpickled) against one state of the same "
        f"examples, 2 threads, median of {repeats} interleaved runs (goal: <= 1.2x)",
        ["metric", "examples", "N", "median s", "vs N = 1", "per-run ratio", "|value - N=1's|"],
        rows,
    )
    print(peak_line)


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmarks det-estimator's reducers.")
    parser.add_argument("--quick", action="store_true", help="small sizes, to check that the script runs")
    parser.add_argument("--large", action="store_true", help="table 6 and the peak memory at 1e8 examples")
    parser.add_argument("--only", default="1,2,3,4,5,6", help="comma-separated tables to print")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if "1" in only:
        exact_ranking_against_sklearn(
            [10_000, 100_000] if args.quick else [1_000_000, 10_000_000], 1 if args.quick else 5
        )
    if "2" in only:
        binned_over_draws(20_000 if args.quick else 200_000, 2 if args.quick else 20)
    if "3" in only:
        evaluate_overhead(100_000 if args.quick else 1_000_000, 2 if args.quick else 21)
    if "4" in only:
        state_bytes(100_000 if args.quick else 1_000_000)
    if "5" in only:
        per_batch_accumulate(200 if args.quick else 5000, 3 if args.quick else 11)
    if "6" in only:
        size = 100_000 if args.quick else 100_000_000 if args.large else 10_000_000
        reduction_of_many_states(size, 1 if args.quick else 3 if args.large else 5)


if __name__ == "__main__":
    main()
