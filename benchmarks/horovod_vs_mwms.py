"""Horovod against TensorFlow's MultiWorkerMirroredStrategy on 2 processes, for the same Keras model, side by side.

Trains the same MLP with ``model.fit`` on 2 processes of this machine, once under
``python -m det_estimator.launch.horovod`` (``hvd.DistributedOptimizer``, Gloo
allreduce) and once under ``python -m det_estimator.launch.tensorflow``
(``MultiWorkerMirroredStrategy``, gRPC collectives), with the same global batch, and
prints the steady-state throughput of each (records per second over both processes,
timed from batch ``--warmup`` to the last), fastest and median of ``--repeats``
interleaved runs, and their ratio. One process alone is printed too, and each engine's 2
processes against it.

On the current stack, which has no Horovod, only MultiWorkerMirroredStrategy and one
process run. ``benchmarks/stacks.py horovod_vs_mwms`` runs it on both stacks, side by side.

Usage: ``.venv/bin/python benchmarks/horovod_vs_mwms.py [--steps 300] [--repeats 3]``
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from stacks import Figure, write_figures

from det_estimator import _stack

NUM_FEATURES, NUM_ROWS, GLOBAL_BATCH = 64, 65_536, 512
WIDTH = 256


def _data():
    import numpy as np

    features = np.random.default_rng(0).normal(size=(NUM_ROWS, NUM_FEATURES)).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] > 0).astype(np.float32)
    return features, labels


def _model(optimizer):
    import tensorflow as tf

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(WIDTH, activation="relu", input_shape=(NUM_FEATURES,)),
            tf.keras.layers.Dense(WIDTH, activation="relu"),
            tf.keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=optimizer, loss="binary_crossentropy")
    return model


def worker(engine: str, steps: int, warmup: int) -> None:
    """One process of a run: trains ``steps`` batches and prints the chief's throughput."""
    import tensorflow as tf

    import det_estimator as det

    class Timer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == warmup:
                self.started = time.perf_counter()

        def on_train_end(self, logs=None):
            self.seconds = time.perf_counter() - self.started

    features, labels = _data()
    callbacks = [Timer()]
    if engine == "horovod":
        import horovod.tensorflow.keras as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        model = _model(hvd.DistributedOptimizer(tf.keras.optimizers.Adam(1e-3)))
        data = tf.data.Dataset.from_tensor_slices((features[rank::size], labels[rank::size]))
        data = data.repeat().batch(GLOBAL_BATCH // size).prefetch(2)
        callbacks.insert(0, hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    else:
        distributed, strategy = det.core.DistributedContext.from_tf_config()
        rank, size = distributed.rank, distributed.size
        with strategy.scope():
            model = _model(tf.keras.optimizers.Adam(1e-3))
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        data = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(GLOBAL_BATCH)
        data = data.prefetch(2).with_options(options)
    model.fit(data, epochs=1, steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    if rank == 0:
        timer = callbacks[-1]
        rate = (steps - warmup) * GLOBAL_BATCH / timer.seconds
        print("RESULT " + json.dumps({"engine": engine, "processes": size, "records_per_second": rate}), flush=True)


def launch(engine: str, slots: int, steps: int, warmup: int) -> float:
    launcher = "horovod" if engine == "horovod" else "tensorflow"
    command = [sys.executable, "-m", f"det_estimator.launch.{launcher}", "--slots", str(slots), "--"]
    command += [sys.executable, os.path.abspath(__file__), "--worker", engine, "--steps", str(steps)]
    command += ["--warmup", str(warmup)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    )
    for line in result.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])["records_per_second"]
    raise RuntimeError(f"{engine} on {slots} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--figures", help="also write the figures to this file (for benchmarks/stacks.py)")
    parser.add_argument("--worker", choices=("horovod", "mwms"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.warmup)
        return
    engines = ("horovod", "mwms") if _stack.has_horovod() else ("mwms",)
    rates: dict[str, list[float]] = {engine: [] for engine in (*engines, "one process")}
    for repeat in range(args.repeats):
        for engine in engines if repeat % 2 == 0 else engines[::-1]:
            rates[engine].append(launch(engine, 2, args.steps, args.warmup))
        rates["one process"].append(launch("mwms", 1, args.steps, args.warmup))
    print(
        f"model.fit of a {NUM_FEATURES}-{WIDTH}-{WIDTH}-1 MLP, global batch {GLOBAL_BATCH}, "
        f"{args.steps} steps ({args.warmup} of warm-up), this machine: {os.cpu_count()} cores"
    )
    if "horovod" not in engines:
        print("Horovod is not installed here (the current stack): MultiWorkerMirroredStrategy and one process only")
    print(f"{'records/s over all processes':46}{'fastest':>10}{'median':>10}   ({args.repeats} interleaved runs)")
    names = {
        "horovod": "Horovod (Gloo), 2 processes",
        "mwms": "MultiWorkerMirroredStrategy, 2 processes",
        "one process": "one process (default strategy)",
    }
    figures = []
    for key in rates:
        print(f"{names[key]:46}{max(rates[key]):10.0f}{statistics.median(rates[key]):10.0f}")
        figures.append(Figure(f"{names[key]}, fastest", max(rates[key]), "records/s"))
    ratios = {f"{names[engine].split(',')[0]}: 2 processes / 1": (engine, "one process") for engine in engines}
    if "horovod" in engines:
        ratios["Horovod / MultiWorkerMirroredStrategy"] = ("horovod", "mwms")
    for name, (over, under) in ratios.items():
        fastest = max(rates[over]) / max(rates[under])
        median = statistics.median(rates[over]) / statistics.median(rates[under])
        print(f"{'ratio ' + name:46}{fastest:10.2f}{median:10.2f}")
        figures.append(Figure(f"{name}, fastest", fastest, "x"))
    write_figures(args.figures, figures)


if __name__ == "__main__":
    main()
