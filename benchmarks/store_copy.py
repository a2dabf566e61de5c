"""What ``store copy`` costs for a store of 100,000 metric rows against one of 1,000,000, side by side in one run.

Each store holds one experiment of 10 trials and ``--rows`` (and a tenth of that)
training metric rows, recorded by bulk inserts into the metrics table (the store's own
write API takes one transaction per row). Each is copied by ``det-estimator store copy``
in a process of its own, into a new SQLite file and into an empty PostgreSQL database
(a throwaway server of tests/support/postgres.py, or ``--postgresql URL``); printed per
copy: seconds, rows a second, and the copying process's peak resident memory, with the
ratio of the large store's figure to the small one's. The copy reads and writes a page
of rows at a time, so its memory should not grow with the store (a ratio near 1), while
its time grows with the rows (near 10).

Usage: ``.venv/bin/python benchmarks/store_copy.py [--rows 1000000]``
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy

from det_estimator.store import ExperimentStore, State, StoreLocation
from det_estimator.store._tables import METRICS

TRIALS = 10
# The copy in a process of its own, which reports its peak resident memory (KiB on Linux) after.
COPY = """
import contextlib, io, json, resource, sys
from det_estimator.cli import main
with contextlib.redirect_stdout(io.StringIO()) as output:
    status = main(["store", "copy", sys.argv[1], sys.argv[2], "--json"])
assert status == 0, output.getvalue()
print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def make_store(path: Path, rows: int) -> None:
    """A store of one experiment with 10 trials and ``rows`` training metric rows."""
    with ExperimentStore(path) as store:
        experiment = store.create_experiment("bench", {"searcher": {"metric": "loss"}}, "/c", "m:T", 1, False)
        trials = [store.create_trial(experiment, {"lr": n}, n, path.parent / "checkpoints") for n in range(TRIALS)]
        store.set_state(experiment, State.COMPLETED)  # a store whose experiment runs is refused
    engine = sqlalchemy.create_engine(StoreLocation(path=path).sqlalchemy_url())
    metrics = json.dumps({"loss": 0.123456789, "accuracy": 0.987654321, "auc": 0.5})
    with engine.begin() as connection:
        page = 10_000
        for start in range(0, rows, page):
            connection.execute(
                METRICS.insert(),
                [
                    {
                        "trial_id": trials[n % TRIALS],
                        "kind": "training",
                        "batches": n // TRIALS + 1,
                        "metrics": metrics,
                        "recorded_at": 1.7e9 + n,
                        "run_id": None,
                    }
                    for n in range(start, min(start + page, rows))
                ],
            )
    engine.dispose()


def copy(source: Path, destination: str, files: Path) -> tuple[float, int]:
    """Seconds the copy took, and the copying process's peak resident memory in MiB.

    A new PostgreSQL store keeps its files in ``files``.
    """
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", COPY, str(source), destination],
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "DET_ESTIMATOR_STORE_FILES": str(files)},
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the copy failed:\n{done.stdout}\n{done.stderr}")
    return seconds, json.loads(done.stdout.splitlines()[-1])["peak_kib"] // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="metric rows of the large store")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="store-copy-"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
    import postgres

    why = postgres.missing()
    if why:
        print(f"PostgreSQL left out: {why}")
    server = None if why else postgres.start_server()
    sizes = [args.rows // 10, args.rows]
    results: dict[str, list[tuple[float, int]]] = {}
    try:
        for number, rows in enumerate(sizes):
            source = folder / f"source-{rows}" / "store.sqlite"
            source.parent.mkdir()
            started = time.perf_counter()
            make_store(source, rows)
            print(f"made a store of {rows:,} metric rows in {time.perf_counter() - started:.1f} s")
            files = folder / f"files-{rows}"
            results.setdefault("SQLite to SQLite", []).append(copy(source, str(folder / f"copy-{rows}.sqlite"), files))
            if server is not None:
                url = server.new_database(f"copy_{number}")
                results.setdefault("SQLite to PostgreSQL", []).append(copy(source, url, files))
    finally:
        if server is not None:
            server.stop()
    small, large = sizes
    print(f"\n{'copy':<22}{'rows':>11}{'seconds':>10}{'rows/s':>10}{'peak MiB':>10}")
    for name, ((small_s, small_mib), (large_s, large_mib)) in results.items():
        for rows, seconds, mib in ((small, small_s, small_mib), (large, large_s, large_mib)):
            print(f"{name:<22}{rows:>11,}{seconds:>10.1f}{rows / seconds:>10,.0f}{mib:>10}")
        ratio = f"{large / small:>11.1f}{large_s / small_s:>10.1f}{'':>10}{large_mib / small_mib:>10.2f}"
        print(f"{'  ratio large/small':<22}{ratio}")
    print(f"\nstores in {folder}")


if __name__ == "__main__":
    main()
