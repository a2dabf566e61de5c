"""What DeterminedCallback costs in training against plain ``model.fit``, side by side in one run.

Prints the training throughput (batches per second) of ``model.fit`` on a small MLP with
and without ``det.keras.DeterminedCallback`` (defaults: training metrics reported every
100 batches, a pause check every 10, a checkpoint at every epoch's end), and their ratio
(target at least 0.95). Both are timed by the same Keras callback from batch
``--warmup`` of the first epoch to the end of ``fit``, so model building and tracing are
excluded while the callback's checkpoints at epoch ends are included. Runs alternate, so
a change in the machine's load hits both alike; the fastest run of each (the least
disturbed by other work) and the median of ``--repeats``.

Usage: ``.venv/bin/python benchmarks/keras_callback_overhead.py [--epochs 3] [--repeats 6]``
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# core.init() records every run in the experiment store: a throwaway one, not the user's.
_SCRATCH = tempfile.mkdtemp(prefix="keras-callback-overhead-")
os.environ["DET_ESTIMATOR_STORE"] = os.path.join(_SCRATCH, "store.sqlite")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import det_estimator as det  # noqa: E402

NUM_FEATURES, NUM_ROWS, BATCH_SIZE = 32, 65_536, 256
FEATURES = np.random.default_rng(0).normal(size=(NUM_ROWS, NUM_FEATURES)).astype(np.float32)
LABELS = (FEATURES[:, 0] + FEATURES[:, 1] > 0).astype(np.float32)


class Throughput(tf.keras.callbacks.Callback):
    """Times training two ways: the batches alone (within epochs), and the whole of fit after the warm-up.

    ``batch_rate`` counts only the time from one batch's end to the next one's in the same
    epoch (what the callback adds to every batch, and its reports every N batches);
    ``fit_rate`` also counts the epochs' ends (the callback's checkpoints).
    """

    def __init__(self, warmup: int):
        super().__init__()
        self._warmup, self._batches, self._started = warmup, 0, None
        self._last, self._timed, self._timed_batches = None, 0.0, 0
        self.batch_rate = self.fit_rate = None

    def on_epoch_begin(self, epoch, logs=None):
        self._last = None

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self._batches += 1
        if self._batches == self._warmup:
            self._started = now
        if self._batches > self._warmup and self._last is not None:
            self._timed += now - self._last
            self._timed_batches += 1
        self._last = now

    def on_train_end(self, logs=None):
        self.batch_rate = self._timed_batches / self._timed
        self.fit_rate = (self._batches - self._warmup) / (time.perf_counter() - self._started)


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(64, activation="relu", input_shape=(NUM_FEATURES,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
    return model


def dataset() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((FEATURES, LABELS)).batch(BATCH_SIZE).prefetch(2)


def run(with_callback: bool, epochs: int, warmup: int) -> Throughput:
    timer = Throughput(warmup)
    model = build_model()
    if not with_callback:
        model.fit(dataset(), epochs=epochs, callbacks=[timer], verbose=0)
        return timer
    with det.core.init(checkpoint_storage=os.path.join(_SCRATCH, "checkpoints")) as core_context:
        callback = det.keras.DeterminedCallback(core_context, None, "benchmark")
        batch_end = callback.on_train_batch_end

        def timed_batch_end(batch, logs=None):
            started = time.perf_counter()
            batch_end(batch, logs)
            timer.callback_seconds.append(time.perf_counter() - started)

        callback.on_train_batch_end = timed_batch_end  # what the callback itself adds to each batch
        timer.callback_seconds = []
        model.fit(dataset(), epochs=epochs, callbacks=[callback, timer], verbose=0)
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    plain, callback = [], []
    for repeat in range(args.repeats):
        # Which goes first alternates too: a run can warm (or load) the machine for the next.
        for with_callback in (False, True) if repeat % 2 == 0 else (True, False):
            (callback if with_callback else plain).append(run(with_callback, args.epochs, args.warmup))
    steps = NUM_ROWS // BATCH_SIZE
    print(f"model.fit of a 32-64-64-1 MLP, batch {BATCH_SIZE}, {args.epochs} epochs of {steps} batches, one process")
    print(f"{'batches/s':44}{'fastest':>10}{'median':>10}   ({args.repeats} interleaved runs each)")
    for kind, label in (("batch_rate", "training batches"), ("fit_rate", "whole fit, epoch-end checkpoints included")):
        rates = {
            name: [getattr(timer, kind) for timer in timers] for name, timers in (("plain", plain), ("det", callback))
        }
        print(f"{label}:")
        print(f"{'  plain model.fit':44}{max(rates['plain']):10.1f}{statistics.median(rates['plain']):10.1f}")
        print(f"{'  with DeterminedCallback':44}{max(rates['det']):10.1f}{statistics.median(rates['det']):10.1f}")
        fastest = max(rates["det"]) / max(rates["plain"])
        median = statistics.median(rates["det"]) / statistics.median(rates["plain"])
        print(f"{'  ratio (callback / plain, goal >= 0.95)':44}{fastest:10.3f}{median:10.3f}")
    own = [seconds for timer in callback for seconds in timer.callback_seconds]
    batch_seconds = 1 / statistics.median(timer.batch_rate for timer in plain)
    print(
        f"the callback's own on_train_batch_end: median {statistics.median(own) * 1e6:.1f} us, "
        f"mean {statistics.mean(own) * 1e6:.1f} us (reports every 100 batches included), "
        f"{statistics.mean(own) / batch_seconds:.1%} of a median plain batch ({batch_seconds * 1e3:.2f} ms)"
    )


if __name__ == "__main__":
    main()
