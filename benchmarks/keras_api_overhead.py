"""What ``context.fit`` (the new Keras API) costs against plain ``model.fit``, side by side in one run.

Trains the same model on the same NumPy arrays with ``model.fit`` and with
``context.fit`` of ``det.keras.init()`` (run by hand: recorded in a throwaway store,
with its DeterminedCallback reporting metrics every 100 batches, checking for a pause
every 10 and checkpointing at every epoch's end), and prints two throughputs of each
and their ratio (target at least 0.95), also for ``context.fit`` without a checkpoint at
each epoch's end (only the final one), which isolates the per-batch work:

- steady state: batches per second from batch ``--warmup`` to the last batch of the
  run, timed by the same callback in both (epoch ends included, the first tracing not);
- whole fit: batches per second of the whole ``fit`` call, validation and checkpoints
  included.

Runs alternate, so a change in the machine's load hits both alike; for each, the
fastest run (the least disturbed by other work on the machine) and the median of
``--repeats``. On a machine shared with other work the wall-clock figures swing by tens
of percent from run to run, so it also prints the time spent inside the callbacks
``context.fit`` adds, a share of its fits that other load does not inflate.

Usage: ``.venv/bin/python benchmarks/keras_api_overhead.py [--epochs 2] [--repeats 5]``
"""

import argparse
import functools
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# det.keras.init() by hand records the run in the default store: a throwaway one, not the user's.
_SCRATCH = tempfile.mkdtemp(prefix="keras-api-overhead-")
os.environ["DET_ESTIMATOR_STORE"] = os.path.join(_SCRATCH, "store.sqlite")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import det_estimator as det  # noqa: E402
from det_estimator.keras import DeterminedCallback  # noqa: E402
from det_estimator.keras._engine._metrics import GlobalMetrics  # noqa: E402

NUM_FEATURES, NUM_ROWS, VALIDATION_ROWS, BATCH_SIZE = 32, 131_072, 8_192, 256
_RNG = np.random.default_rng(0)
FEATURES = _RNG.normal(size=(NUM_ROWS + VALIDATION_ROWS, NUM_FEATURES)).astype(np.float32)
LABELS = (FEATURES[:, 0] + FEATURES[:, 1] > 0).astype(np.float32)


class Throughput(tf.keras.callbacks.Callback):
    """Batches per second from the warm-up batch to the last one."""

    def __init__(self, warmup: int) -> None:
        super().__init__()
        self._warmup = warmup
        self._batches = 0
        self._started = None
        self.value = None
        # Keras then hands it the batch's logs without waiting for their values, as without callbacks.
        self._supports_tf_logs = True

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches == self._warmup:
            self._started = time.perf_counter()

    def on_train_end(self, logs=None):
        self.value = (self._batches - self._warmup) / (time.perf_counter() - self._started)


class HookTimer:
    """Time spent inside the callbacks context.fit adds (their hooks), which no other load on the machine inflates.

    It counts only their Python work, not what Keras does to call them.
    """

    def __init__(self, *classes: type) -> None:
        self.seconds = 0.0
        for cls in classes:
            for name in (
                "on_train_begin",
                "on_train_batch_end",
                "on_epoch_end",
                "on_test_begin",
                "on_test_end",
                "on_train_end",
            ):
                if name in vars(cls):
                    setattr(cls, name, self._timed(getattr(cls, name)))

    def _timed(self, hook):
        @functools.wraps(hook)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return hook(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


def compiled_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.Input((NUM_FEATURES,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(
        tf.keras.optimizers.Adam(1e-3), tf.keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    return model


def run(fit, epochs: int, warmup: int) -> tuple[float, float, float]:
    """(steady-state, whole-fit) batches per second of one ``fit``, and its seconds."""
    throughput = Throughput(warmup)
    x, y = FEATURES[:NUM_ROWS], LABELS[:NUM_ROWS]
    validation = (FEATURES[NUM_ROWS:], LABELS[NUM_ROWS:])
    started = time.perf_counter()
    fit(x, y, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False, validation_data=validation, callbacks=[throughput])
    elapsed = time.perf_counter() - started
    return throughput.value, epochs * (NUM_ROWS // BATCH_SIZE) / elapsed, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2, help=f"epochs of {NUM_ROWS // BATCH_SIZE} batches per run")
    parser.add_argument("--warmup", type=int, default=50, help="batches before the steady-state timing starts")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each, alternating")
    args = parser.parse_args()

    context = det.keras.init(checkpoint_storage=os.path.join(_SCRATCH, "checkpoints"))
    fits = {
        "model.fit": lambda model, *a, **k: model.fit(*a, verbose=0, **k),
        "context.fit": lambda model, *a, **k: context.fit(model, *a, verbose=0, **k),
        # The per-batch work alone: no checkpoint at each epoch's end, only the final one.
        "  no epoch ckpt": lambda model, *a, **k: context.fit(model, *a, verbose=0, checkpoint_every_epochs=None, **k),
    }
    for fit in fits.values():  # a first run of each, not counted: TensorFlow's own warm-up
        run(functools.partial(fit, compiled_model()), 1, args.warmup)
    results = {name: [] for name in fits}
    timer = HookTimer(DeterminedCallback, GlobalMetrics)
    inside, fit_seconds = 0.0, 0.0
    for _ in range(args.repeats):
        for name, fit in fits.items():
            before = timer.seconds
            results[name].append(run(functools.partial(fit, compiled_model()), args.epochs, args.warmup))
            if name == "context.fit":
                inside += timer.seconds - before
                fit_seconds += results[name][-1][2]

    print(
        f"{args.epochs} epochs of {NUM_ROWS // BATCH_SIZE} batches of {BATCH_SIZE}, {args.repeats} runs each, "
        f"alternating (TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})"
    )
    print(f"{'':<16}{'steady fastest':>16}{'steady median':>16}{'whole fastest':>16}{'whole median':>16}  (batches/s)")
    figures = {}
    for name, runs in results.items():
        steady, whole = [r[0] for r in runs], [r[1] for r in runs]
        figures[name] = (max(steady), statistics.median(steady), max(whole), statistics.median(whole))
        print(f"{name:<16}" + "".join(f"{value:>16.1f}" for value in figures[name]))
    for name in ("context.fit", "  no epoch ckpt"):
        ratios = [mine / theirs for mine, theirs in zip(figures[name], figures["model.fit"])]
        label = "ratio" if name == "context.fit" else "  ratio"
        print(f"{label:<16}" + "".join(f"{value:>16.3f}" for value in ratios) + "  (target >= 0.95)")
    share = inside / fit_seconds
    print(
        f"time inside the callbacks context.fit adds: {share:.1%} of its fits (metrics, pause checks, checkpoints): "
        f"a ratio of {1 / (1 + share):.3f} from their own work, Keras' cost of calling them not counted"
    )
    context.close()


if __name__ == "__main__":
    main()
