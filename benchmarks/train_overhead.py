"""What the harness costs in training, side by side in one run.

Prints:

1. steady-state training throughput (batches per second) of ``det.run_trial`` against a
   plain ``estimator.train`` on the same model and data, and their ratio (target at
   least 0.95). Both are timed by the same hook between batch ``--warmup`` and the last
   batch, so graph building, session start-up, validation and checkpoints are excluded;
   the harness's per-step and per-workload work (batch counting, pause check, loss
   report every ``scheduling_unit`` batches) is included. Runs alternate, so a change in
   the machine's load hits both alike; medians of ``--repeats``.
2. the seconds one checkpoint with one SavedModel export takes (model files, export,
   checksums, atomic seal).

Usage: ``.venv/bin/python benchmarks/train_overhead.py [--batches 3000] [--repeats 3]``
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# run_trial records its runs in the experiment store: a throwaway one, not the user's.
os.environ["DET_ESTIMATOR_STORE"] = os.path.join(tempfile.mkdtemp(prefix="train-overhead-"), "store.sqlite")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import det_estimator as det  # noqa: E402
from det_estimator.checkpoint import TrialCheckpoints  # noqa: E402
from det_estimator.estimator._checkpointing import write_checkpoint_files  # noqa: E402

NUM_FEATURES, NUM_ROWS, BATCH_SIZE = 32, 65_536, 256
FEATURES = np.random.default_rng(0).normal(size=(NUM_ROWS, NUM_FEATURES)).astype(np.float32)
LABELS = (FEATURES[:, 0] + FEATURES[:, 1] > 0).astype(np.float32)


class ThroughputHook(tf.estimator.SessionRunHook):
    """Times the batches from the warm-up to the last one.

    It stops in the last batch's after_run, which runs before the harness's control
    hook (placed last) validates and checkpoints at the end of training.
    """

    results: list = []

    def __init__(self, warmup: int, batches: int):
        self._warmup = warmup
        self._total = batches
        self._batches = 0
        self._started = None

    def after_run(self, run_context, run_values):
        self._batches += 1
        if self._batches == self._warmup:
            self._started = time.perf_counter()
        elif self._batches == self._total:
            ThroughputHook.results.append((self._total - self._warmup) / (time.perf_counter() - self._started))


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(features, 64, activation=tf.nn.relu)
    hidden = tf.compat.v1.layers.dense(hidden, 64, activation=tf.nn.relu)
    logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1), axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"probability": tf.sigmoid(logits)})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    optimizer = params.get("optimizer") or tf.compat.v1.train.AdamOptimizer(1e-3)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def dataset() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((FEATURES, LABELS))


def serving_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
    return tf.estimator.export.TensorServingInputReceiver(x, {"x": x})


class BenchmarkTrial(det.EstimatorTrial):
    def build_estimator(self):
        optimizer = self.context.wrap_optimizer(tf.compat.v1.train.AdamOptimizer(1e-3))
        return tf.estimator.Estimator(model_fn, params={"optimizer": optimizer})

    def build_train_spec(self):
        def input_fn():
            return self.context.wrap_dataset(dataset()).batch(self.context.get_per_slot_batch_size())

        timing = ThroughputHook(self.context.get_hparam("warmup"), self.context.get_hparam("batches"))
        return tf.estimator.TrainSpec(input_fn, hooks=[timing])

    def build_validation_spec(self):
        return tf.estimator.EvalSpec(lambda: self.context.wrap_dataset(dataset().take(BATCH_SIZE)).batch(BATCH_SIZE))


def plain_estimator_throughput(batches: int, warmup: int) -> float:
    # The same pipeline the harness builds: the trial's batched dataset, then repeat().
    with tempfile.TemporaryDirectory() as model_dir:
        config = tf.estimator.RunConfig(model_dir=model_dir, save_checkpoints_steps=None, save_checkpoints_secs=None)
        estimator = tf.estimator.Estimator(model_fn, config=config, params={})
        estimator.train(
            lambda: dataset().batch(BATCH_SIZE).repeat(), steps=batches, hooks=[ThroughputHook(warmup, batches)]
        )
    return ThroughputHook.results[-1]


def harness_throughput(batches: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as storage:
        config = {
            "entrypoint": "train_overhead:BenchmarkTrial",
            "hyperparameters": {"global_batch_size": BATCH_SIZE, "warmup": warmup, "batches": batches},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": batches}},
            "checkpoint_storage": {"type": "shared_fs", "host_path": storage},
            "checkpoint_policy": "none",
        }
        det.run_trial(BenchmarkTrial, config)
    return ThroughputHook.results[-1]


def checkpoint_seconds(repeats: int) -> float:
    timings = []
    with tempfile.TemporaryDirectory() as model_dir, tempfile.TemporaryDirectory() as storage:
        estimator = tf.estimator.Estimator(model_fn, model_dir=model_dir, params={})
        estimator.train(lambda: dataset().batch(BATCH_SIZE).repeat(), steps=10)
        store = TrialCheckpoints(storage)
        for _ in range(repeats):
            started = time.perf_counter()
            with store.write({"steps_completed": 10}) as pending:
                write_checkpoint_files(pending.path, estimator.latest_checkpoint(), estimator, {"raw": serving_fn}, [])
            timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description="Measures the harness's training overhead.")
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    plain, harness = [], []
    for _ in range(args.repeats):
        plain.append(plain_estimator_throughput(args.batches, args.warmup))
        harness.append(harness_throughput(args.batches, args.warmup))
    plain_rate, harness_rate = statistics.median(plain), statistics.median(harness)
    print(
        f"\n1. Training throughput, {args.batches} batches of {BATCH_SIZE} (median of {args.repeats}, warm-up excluded)"
    )
    print(f"   plain estimator.train   {plain_rate:8.1f} batches/s   runs: {', '.join(f'{r:.1f}' for r in plain)}")
    print(f"   det.run_trial           {harness_rate:8.1f} batches/s   runs: {', '.join(f'{r:.1f}' for r in harness)}")
    print(f"   ratio harness / plain   {harness_rate / plain_rate:8.3f}   (target >= 0.95)")
    print(f"\n2. One checkpoint with one SavedModel export: {checkpoint_seconds(args.repeats):.2f} s (median)")


if __name__ == "__main__":
    main()
