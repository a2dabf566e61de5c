"""Evaluation on 2 processes against 1, on a compute-bound model, and where the time goes.

Runs ``estimator.evaluate`` of a dense model (``--features`` inputs, two hidden layers of
``--hidden`` units) over ``--examples`` rows with exact ``RocAuc`` and ``AveragePrecision``
through ``make_metric``: once as one plain process, once as two Horovod processes
(``horovodrun -np 2 --gloo``) that each evaluate their round-robin share, alternating, for
``--repeats`` rounds. Both use the machine's cores alike: a process gets ``cores / processes``
TensorFlow threads, and the reducers as many sorting threads. The global batch is the same.

Prints the wall time of the evaluation (the slowest rank's, from the start of ``evaluate``
to its return, so graph building and the final reduction are included), its ratio 2 / 1
(goal: at most 0.6), and for every rank: the bytes its states sent through the allgather,
the time its accumulate calls took, the time from its last batch to the start of the last
reduction (the other metric's reduction, the other rank finishing, the encoding, which
sorts the state, and the allgather), and the time of both reductions.

Usage: ``.venv/bin/python benchmarks/distributed_evaluation.py [--examples N] [--repeats R]``
"""

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

BATCH_SIZE = 1024


def make_data(num_examples: int, num_features: int):
    """Features, click labels (about 3% positives) and the row order, the same in every process."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(num_examples, num_features)).astype(np.float32)
    labels = (features[:, 0] + 0.5 * rng.normal(size=num_examples) > 2.0).astype(np.float32)
    return features, labels


def run_worker(args: argparse.Namespace) -> None:
    """One process of an evaluation: evaluates its share twice and writes its timings."""
    import tensorflow as tf

    from det_estimator import _horovod
    from det_estimator.reducers import AveragePrecision, RocAuc, make_metric

    tf.get_logger().setLevel("ERROR")
    if "HOROVOD_RANK" in os.environ:
        _horovod.init()
    rank, size = _horovod.rank(), _horovod.size()
    threads = max(1, (os.cpu_count() or 1) // size)
    timings = {"accumulate": 0.0, "last_batch": 0.0, "reduce_start": 0.0, "reduce": 0.0, "bytes": 0}

    def timed(reducer_type):
        class Timed(reducer_type):
            def accumulate(self, metric):
                start = time.perf_counter()
                state = super().accumulate(metric)
                timings["last_batch"] = time.perf_counter()
                timings["accumulate"] += timings["last_batch"] - start
                return state

            def cross_slot_reduce(self, per_slot_metrics):
                timings["reduce_start"] = start = time.perf_counter()
                value = super().cross_slot_reduce(per_slot_metrics)
                timings["reduce"] += time.perf_counter() - start
                if size > 1:  # what the allgather brought, measured after the fact (not timed)
                    timings["bytes"] += sum(len(pickle.dumps(("state", s), protocol=5)) for s in per_slot_metrics)
                return value

        return Timed(num_threads=threads)

    def model_fn(features, labels, mode):
        hidden = features
        # Seeded weights: every process must evaluate the same model.
        for layer in range(2):
            initializer = tf.compat.v1.glorot_uniform_initializer(seed=layer)
            hidden = tf.compat.v1.layers.dense(hidden, args.hidden, tf.nn.relu, kernel_initializer=initializer)
        output_initializer = tf.compat.v1.glorot_uniform_initializer(seed=2)
        logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=output_initializer), axis=1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        if mode == tf.estimator.ModeKeys.TRAIN:
            step = tf.compat.v1.train.get_global_step()
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.compat.v1.assign_add(step, 1))
        scored = {"labels": labels, "predictions": tf.sigmoid(logits)}
        metrics = {
            "auc": make_metric(scored, timed(RocAuc), np.float64),
            "average_precision": make_metric(scored, timed(AveragePrecision), np.float64),
        }
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)

    features, labels = make_data(args.examples, args.features)
    rows = np.arange(rank, args.examples, size)  # round-robin, as wrap_dataset shards

    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices((features[rows], labels[rows]))
        # Without autotuning: closing the session would wait for its thread, seconds at random
        # (README, "Supported versions"), and the timed evaluation would include that wait.
        options = tf.data.Options()
        options.autotune.enabled = False
        return dataset.batch(BATCH_SIZE // size).prefetch(2).with_options(options)

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    estimator = tf.estimator.Estimator(
        model_fn,
        model_dir=os.path.join(args.output_dir, f"model_rank{rank}"),
        config=tf.estimator.RunConfig(session_config=config),
    )
    estimator.train(lambda: tf.data.Dataset.from_tensors((features[:2], labels[:2])).repeat(), steps=1)
    estimator.evaluate(input_fn, steps=2)  # warm-up: TensorFlow's first graph in a process is slower
    timings.update(accumulate=0.0, reduce=0.0, bytes=0)
    start = time.perf_counter()
    metrics = estimator.evaluate(input_fn)
    timings["evaluate"] = time.perf_counter() - start
    timings["wait"] = timings["reduce_start"] - timings["last_batch"]
    timings["auc"] = float(metrics["auc"])
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump({key: value for key, value in timings.items() if key not in ("last_batch", "reduce_start")}, out)


def launch(num_processes: int, args: argparse.Namespace) -> list[dict]:
    """Runs one evaluation on ``num_processes`` processes; returns each rank's timings."""
    output_dir = tempfile.mkdtemp(prefix="bench_dist_eval_")
    command = [sys.executable, __file__, "--worker", "--output-dir", output_dir]
    command += ["--examples", str(args.examples), "--features", str(args.features), "--hidden", str(args.hidden)]
    if num_processes > 1:
        horovodrun = str(Path(sys.executable).parent / "horovodrun")
        command = [horovodrun, "-np", str(num_processes), "-H", f"localhost:{num_processes}", "--gloo", *command]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    job = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if job.returncode != 0:
        raise RuntimeError(f"{num_processes}-process evaluation failed:\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}")
    return [json.loads(Path(output_dir, f"rank{rank}.json").read_text()) for rank in range(num_processes)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    runs: dict[int, list[list[dict]]] = {1: [], 2: []}
    for _ in range(args.repeats):  # alternating, so drifting machine load hits both alike
        for num_processes in runs:
            runs[num_processes].append(launch(num_processes, args))
    wall = {n: [max(rank["evaluate"] for rank in run) for run in results] for n, results in runs.items()}
    print(
        f"estimator.evaluate of {args.examples:,} rows ({args.features} features, 2 x {args.hidden} hidden units, "
        f"global batch {BATCH_SIZE}) with exact RocAuc and AveragePrecision, {args.repeats} alternating runs, "
        f"{os.cpu_count()} cores shared by the processes"
    )
    print(f"  {'processes':>9}  {'median s':>8}  {'runs s':<24}")
    for num_processes, times in wall.items():
        print(f"  {num_processes:>9}  {statistics.median(times):8.2f}  {' '.join(f'{t:.2f}' for t in times):<24}")
    ratios = [two / one for one, two in zip(wall[1], wall[2])]
    runs_text = " ".join(f"{ratio:.2f}" for ratio in ratios)
    print(f"  ratio 2 / 1 processes: median {statistics.median(ratios):.2f} (per round: {runs_text}; goal <= 0.6)")
    print("\n  where the time goes (median over runs; both metrics together)")
    header = ["processes", "rank", "allgathered bytes", "accumulate s", "last batch -> last reduce s", "reduce s"]
    print("  " + "  ".join(f"{h:>{max(len(h), 9)}}" for h in header))
    for num_processes, results in runs.items():
        for rank in range(num_processes):
            per_run = [run[rank] for run in results]
            cells = [
                str(num_processes),
                str(rank),
                f"{statistics.median(r['bytes'] for r in per_run):,.0f}",
                f"{statistics.median(r['accumulate'] for r in per_run):.3f}",
                f"{statistics.median(r['wait'] for r in per_run):.3f}",
                f"{statistics.median(r['reduce'] for r in per_run):.3f}",
            ]
            print("  " + "  ".join(f"{c:>{max(len(h), 9)}}" for c, h in zip(cells, header)))
    aucs = {n: sorted({round(rank["auc"], 12) for run in results for rank in run}) for n, results in runs.items()}
    print(f"\n  AUC of every rank and run, by number of processes: {aucs}")


if __name__ == "__main__":
    main()
