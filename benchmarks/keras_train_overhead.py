"""What a TFKerasTrial costs in training against plain ``model.fit``, side by side in one run.

Prints the steady-state training throughput (batches per second) of ``det.run_trial`` on
a ``TFKerasTrial`` (the model's own ``model.fit``, with the harness's engine as its
callback) and of a plain ``model.fit`` on the same model and the same data, fed as a
``tf.data.Dataset`` and as NumPy arrays, and their ratio (target at least 0.95). Both
are timed by the same Keras callback between batch ``--warmup`` and the last batch, so
building, tracing, validation and checkpoints are excluded; the harness's own work
during training (batch counting, the trial's callbacks, pause checks, and every
``scheduling_unit`` batches the training metrics' report) is included. Runs alternate, so a change in the
machine's load hits both alike; the fastest run of each (the least disturbed by other
work on the machine) and the median of ``--repeats``.

Usage: ``.venv/bin/python benchmarks/keras_train_overhead.py [--batches 3000] [--repeats 5]``, on
either stack; ``benchmarks/stacks.py keras_train_overhead`` runs it on both, side by side.
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# run_trial records its runs in the experiment store: a throwaway one, not the user's.
os.environ["DET_ESTIMATOR_STORE"] = os.path.join(tempfile.mkdtemp(prefix="keras-train-overhead-"), "store.sqlite")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from stacks import Figure, write_figures  # noqa: E402

import det_estimator as det  # noqa: E402

NUM_FEATURES, NUM_ROWS, BATCH_SIZE = 32, 65_536, 256
FEATURES = np.random.default_rng(0).normal(size=(NUM_ROWS, NUM_FEATURES)).astype(np.float32)
LABELS = (FEATURES[:, 0] + FEATURES[:, 1] > 0).astype(np.float32)


class Throughput(tf.keras.callbacks.Callback):
    """Times the batches from the warm-up to the last one."""

    results: list = []

    def __init__(self, warmup: int, batches: int):
        super().__init__()
        self._warmup, self._total = warmup, batches
        self._batches, self._started = 0, None

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches == self._warmup:
            self._started = time.perf_counter()
        elif self._batches == self._total:
            Throughput.results.append((self._total - self._warmup) / (time.perf_counter() - self._started))


def model() -> tf.keras.Model:
    return tf.keras.Sequential(
        [
            tf.keras.Input((NUM_FEATURES,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )


def compile_model(built: tf.keras.Model, optimizer) -> tf.keras.Model:
    built.compile(optimizer, tf.keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"])
    return built


def dataset() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((FEATURES, LABELS)).batch(BATCH_SIZE)


class BenchmarkTrial(det.keras.TFKerasTrial):
    def __init__(self, context):
        super().__init__(context)
        context.configure_fit(verbose=False, shuffle=False)

    def build_model(self):
        optimizer = self.context.wrap_optimizer(tf.keras.optimizers.Adam(1e-3))
        return compile_model(self.context.wrap_model(model()), optimizer)

    def build_training_data_loader(self):
        if self.context.get_hparam("input") == "arrays":
            return FEATURES, LABELS
        return self.context.wrap_dataset(tf.data.Dataset.from_tensor_slices((FEATURES, LABELS))).batch(BATCH_SIZE)

    def build_validation_data_loader(self):
        return FEATURES[:BATCH_SIZE], LABELS[:BATCH_SIZE]

    def keras_callbacks(self):
        return [Throughput(self.context.get_hparam("warmup"), self.context.get_hparam("batches"))]


def plain_fit_throughput(kind: str, batches: int, warmup: int) -> float:
    built = compile_model(model(), tf.keras.optimizers.Adam(1e-3))
    timing = Throughput(warmup, batches)
    if kind == "arrays":
        epochs = -(-batches // (NUM_ROWS // BATCH_SIZE))
        built.fit(FEATURES, LABELS, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False, verbose=0, callbacks=[timing])
    else:
        built.fit(dataset().repeat(), steps_per_epoch=batches, verbose=0, callbacks=[timing])
    return Throughput.results[-1]


def harness_throughput(kind: str, batches: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as storage:
        config = {
            "entrypoint": "keras_train_overhead:BenchmarkTrial",
            "hyperparameters": {"global_batch_size": BATCH_SIZE, "warmup": warmup, "batches": batches, "input": kind},
            "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": batches}},
            "checkpoint_storage": {"type": "shared_fs", "host_path": storage},
            "checkpoint_policy": "none",
        }
        det.run_trial(BenchmarkTrial, config)
    return Throughput.results[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description="Measures a TFKerasTrial's training overhead against model.fit.")
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--figures", help="also write the figures to this file (for benchmarks/stacks.py)")
    args = parser.parse_args()

    figures = []
    print(f"Training throughput, {args.batches} batches of {BATCH_SIZE} (median of {args.repeats}, warm-up excluded)")
    for kind in ("tf.data", "arrays"):
        plain, harness = [], []
        for _ in range(args.repeats):
            plain.append(plain_fit_throughput(kind, args.batches, args.warmup))
            harness.append(harness_throughput(kind, args.batches, args.warmup))
        print(f"\n  input: {kind}             fastest     median   (batches/s)")
        for name, rates in (("plain model.fit", plain), ("TFKerasTrial", harness)):
            runs = ", ".join(f"{rate:.1f}" for rate in rates)
            print(f"   {name:20s} {max(rates):9.1f}  {statistics.median(rates):9.1f}   runs: {runs}")
        fastest, median = max(harness) / max(plain), statistics.median(harness) / statistics.median(plain)
        print(f"   ratio harness / plain {fastest:8.3f}  {median:9.3f}   (target >= 0.95)")
        figures += [
            Figure(f"{kind}: plain model.fit, fastest", max(plain), "batches/s"),
            Figure(f"{kind}: TFKerasTrial, fastest", max(harness), "batches/s"),
            Figure(f"{kind}: harness / plain, fastest", fastest, "x"),
            Figure(f"{kind}: harness / plain, median", median, "x"),
        ]
    write_figures(args.figures, figures)


if __name__ == "__main__":
    main()
