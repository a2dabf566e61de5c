"""What the experiment store's writes cost on SQLite and on PostgreSQL, side by side in one run.

Prints, for an SQLite store file and a PostgreSQL database:

1. the store's writes per validation (what a trial's chief writes: the validation's
   metrics, through the same recorder a run uses, and its progress) and per checkpoint
   (the checkpoint's record, its validation metrics, the retention's query of the best
   checkpoints and the mark of the one it deletes), as the median of ``--repeats`` (200)
   each, the two stores in alternation, with the ratio PostgreSQL / SQLite;
2. the time ``det-estimator experiment list`` takes on a store holding ``--experiments``
   (1,000) finished experiments of one trial and 10 validations each: the command's whole
   run (a new process, as a user sees it) and the listing alone, in this process.

The PostgreSQL database is ``--postgres URL``; without it, a throwaway server is started
from the machine's PostgreSQL (``tests/support/postgres.py``, as the tests do, but with
commits that wait for the disk, as a team's server's do) and stopped at the end. The SQLite
store is as every store is made (WAL). Event files are written under a temporary folder for both.

Usage: ``.venv/bin/python benchmarks/store.py [--postgres URL] [--repeats 200] [--experiments 1000]``
"""

import argparse
import contextlib
import importlib.util
import io
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

from det_estimator.cli import main as cli_main
from det_estimator.store import ExperimentStore, MetricKind, State
from det_estimator.store._recorder import StoreRecorder

COMMAND = str(Path(sys.executable).with_name("det-estimator"))
TESTS_SUPPORT = Path(__file__).resolve().parents[1] / "tests" / "support"
CONFIG = {
    "name": "store benchmark",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"learning_rate": 0.01},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1000}},
}


@contextlib.contextmanager
def postgres_database(url: str) -> Iterator[str]:
    """``url`` if given, else a database on a throwaway server started here."""
    if url:
        yield url
        return
    spec = importlib.util.spec_from_file_location("postgres", TESTS_SUPPORT / "postgres.py")
    postgres = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(postgres)
    if postgres.missing():
        sys.exit(f"No --postgres URL and no server to start: {postgres.missing()}")
    server = postgres.start_server(durable=True)
    try:
        yield server.new_database("store_benchmark")
    finally:
        server.stop()


def new_trial(store: ExperimentStore, storage: Path) -> tuple[int, int]:
    experiment = store.create_experiment("store benchmark", CONFIG, "/context", "python3 train.py", 1, False)
    trial = store.create_trial(experiment, {"learning_rate": 0.01}, 0, str(storage))
    return trial, store.start_run(trial)


class Writes:
    """One trial's chief writing validations and checkpoints to a store, as a run does."""

    def __init__(self, location: str, storage: Path) -> None:
        self.store = ExperimentStore(location)
        self.trial_id, run_id = new_trial(self.store, storage)
        self.experiment_id = self.store.trial(self.trial_id).experiment_id
        self.recorder = StoreRecorder(self.store, self.trial_id, run_id)
        self.checkpoint_dir = storage / "checkpoint"
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        (self.checkpoint_dir / "weights").write_bytes(b"\0" * 4096)
        self.batches = 0
        self.last_checkpoint = ""

    def validation(self) -> None:
        self.batches += 100
        self.recorder.on_progress(self.batches)
        self.recorder.on_validation(self.batches, {"loss": 1.0 / self.batches, "auc": 0.5 + 1e-6 * self.batches})

    def checkpoint(self) -> None:
        self.batches += 100
        name, path = str(uuid.uuid4()), str(self.checkpoint_dir)
        self.recorder.on_checkpoint(name, self.batches, path, {"batches": self.batches, "format": 3})
        self.recorder.on_checkpoint_validation(name, path, {"loss": 1.0 / self.batches})
        self.store.best_checkpoints(self.experiment_id, "loss", True, 1)
        if self.last_checkpoint:
            self.recorder.on_checkpoints_deleted([self.last_checkpoint])
        self.last_checkpoint = name

    def close(self) -> None:
        self.recorder.close()
        self.store.close()


def alternate(variants: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """Times each variant ``repeats`` times, in alternation, so that load on the machine falls on all alike."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, call in variants.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return times


def fill(location: str, storage: Path, experiments: int) -> None:
    """``experiments`` finished experiments of one trial with 10 validations each."""
    with ExperimentStore(location) as store:
        for _ in range(experiments):
            trial, run = new_trial(store, storage)
            for step in range(1, 11):
                store.record_metrics(trial, MetricKind.VALIDATION, step * 100, {"loss": 1.0 / step}, run)
            store.end_run(run, State.COMPLETED, 0)
            store.set_trial_state(trial, State.COMPLETED)
            store.set_state(store.trial(trial).experiment_id, State.COMPLETED)


def list_in_process(location: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        if cli_main(["--store", location, "experiment", "list"]) != 0:
            raise RuntimeError(f"experiment list failed on {location}")


def list_command(location: str) -> None:
    subprocess.run([COMMAND, "--store", location, "experiment", "list"], check=True, stdout=subprocess.DEVNULL)


def ms(seconds: list[float]) -> str:
    return f"{1000 * statistics.median(seconds):8.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="", help="a PostgreSQL database URL (default: a throwaway server)")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--experiments", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, postgres_database(args.postgres) as postgres_url:
        root = Path(directory)
        locations = {"SQLite": str(root / "store.sqlite"), "PostgreSQL": postgres_url}
        writers = {name: Writes(location, root / name) for name, location in locations.items()}
        try:
            validations = alternate({name: w.validation for name, w in writers.items()}, args.repeats)
            checkpoints = alternate({name: w.checkpoint for name, w in writers.items()}, args.repeats)
        finally:
            for writer in writers.values():
                writer.close()
        print(f"1. The store's writes, median of {args.repeats}, the two stores in alternation")
        print(f"   {'':24} {'SQLite':>11} {'PostgreSQL':>11}   PostgreSQL / SQLite")
        for what, times in (("per validation", validations), ("per checkpoint", checkpoints)):
            ratio = statistics.median(times["PostgreSQL"]) / statistics.median(times["SQLite"])
            print(f"   {what:24} {ms(times['SQLite'])} {ms(times['PostgreSQL'])}   {ratio:.2f}x")

        for name, location in locations.items():
            fill(location, root / name, args.experiments)
        listing = alternate(
            {name: lambda location=location: list_in_process(location) for name, location in locations.items()}, 5
        )
        command = alternate(
            {name: lambda location=location: list_command(location) for name, location in locations.items()}, 5
        )
        print(f"\n2. `experiment list` of {args.experiments} experiments (1 trial, 10 validations each), median of 5")
        print(f"   {'':24} {'SQLite':>11} {'PostgreSQL':>11}")
        print(f"   {'the command (a process)':24} {ms(command['SQLite'])} {ms(command['PostgreSQL'])}")
        print(f"   {'the listing alone':24} {ms(listing['SQLite'])} {ms(listing['PostgreSQL'])}")


if __name__ == "__main__":
    main()
