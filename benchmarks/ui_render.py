"""The time to render the web page's experiment page for a large search, and the server's memory.

Fills a new store, through the store's own write API, with a random search of
``--trials`` trials (200) of ``--validations`` validations (100) and as many training
reports each, starts a real ``det-estimator ui`` on it, and prints, as the median of
``--repeats`` requests (5) each, the time to answer:

1. the experiment page (its HTML: the trial table of every trial);
2. its charts' data (every trial's learning curves, the parallel coordinates, the scatters);
3. the experiments page;

then the server's resident memory. Goal: each of the first two under 1 s on 2 cores.

Usage: ``.venv/bin/python benchmarks/ui_render.py [--trials 200] [--validations 100] [--repeats 5]``
"""

import argparse
import json
import math
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from det_estimator.store import ExperimentStore, MetricKind, State


def fill(path: Path, trials: int, validations: int) -> int:
    """A random search of ``trials`` trials with ``validations`` validations and training reports each."""
    config = {
        "name": "benchmark search",
        "entrypoint": "python3 train.py",
        "hyperparameters": {
            "learning_rate": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
            "units": {"type": "categorical", "vals": [32, 64, 128, 256]},
            "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
        },
        "searcher": {"name": "random", "metric": "loss", "max_trials": trials, "max_length": {"batches": 10_000}},
    }
    draw = random.Random(0)
    with ExperimentStore(path) as store:
        experiment = store.create_experiment("benchmark search", config, "/context", "python3 train.py", 1, False)
        for _ in range(trials):
            hparams = {
                "learning_rate": 10 ** draw.uniform(-4, -1),
                "units": draw.choice([32, 64, 128, 256]),
                "dropout": draw.uniform(0, 0.5),
            }
            trial = store.create_trial(experiment, hparams, 0, "/checkpoints")
            run = store.start_run(trial)
            floor = draw.uniform(0.05, 0.5)
            for step in range(1, validations + 1):
                batches = step * 100
                loss = floor + 1 / math.sqrt(step)
                store.record_metrics(trial, MetricKind.TRAINING, batches, {"loss": loss * 1.1}, run)
                store.record_metrics(
                    trial, MetricKind.VALIDATION, batches, {"loss": loss, "accuracy": 1 - loss / 2}, run
                )
            store.end_run(run, State.COMPLETED, 0)
        store.set_state(experiment, State.COMPLETED)
    return experiment


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def timed_get(url: str, repeats: int) -> tuple[float, int]:
    """The median seconds to fetch ``url`` whole, and its size."""
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as answer:
            size = len(answer.read())
        times.append(time.perf_counter() - start)
    return statistics.median(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--validations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.sqlite"
        start = time.perf_counter()
        experiment = fill(path, args.trials, args.validations)
        print(
            f"store: {args.trials} trials x {args.validations} validations and training reports, "
            f"filled in {time.perf_counter() - start:.1f} s"
        )
        port = free_port()
        command = "import sys; from det_estimator.cli import main; sys.exit(main())"
        server = subprocess.Popen(
            [sys.executable, "-c", command, "--store", str(path), "ui", "--port", str(port)],
            stdout=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(base + "/", timeout=5).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            for label, url in (
                ("experiment page (HTML)", f"{base}/experiments/{experiment}"),
                ("experiment charts (JSON)", f"{base}/experiments/{experiment}/charts"),
                ("experiments page (HTML)", f"{base}/"),
            ):
                seconds, size = timed_get(url, args.repeats)
                print(f"{label:26s} {seconds * 1000:8.0f} ms  {size / 1e6:6.2f} MB   (median of {args.repeats})")
            charts = json.loads(urllib.request.urlopen(f"{base}/experiments/{experiment}/charts", timeout=120).read())
            points = sum(len(trace["x"]) for curve in charts["curves"] for trace in curve["traces"])
            print(
                f"charts: {len(charts['curves'])} curves of {points:,} points; parallel coordinates of "
                f"{len(charts['parcoords']['meta'])} trials"
            )
            rss = psutil.Process(server.pid).memory_info().rss
            print(f"server memory (RSS): {rss / 2**20:.0f} MiB")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
