"""Runs every bad input of tests/support/bad_inputs.py, and concurrent uses, through the installed command.

Prints, for the bad inputs: how many were tried, how many got a clear error with the
expected exit status, how many showed a traceback of det-estimator's own (goal 0), and how
many recorded something (goal 0: a row added to or changed in the recorded store, or a
new store made);
for the concurrent uses: whether the store agreed with the disk after each (goal all).

    .venv/bin/python benchmarks/bad_inputs.py [--skip-concurrent]
"""

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
import bad_inputs  # noqa: E402

COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def det(store: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [COMMAND, "--store", str(store), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )


# The store's tables whose rows a command records; a refused command changes none.
_RECORDS = ("experiments", "trials", "trial_runs", "metrics", "checkpoints", "jobs", "trial_restarts")


def records(store: Path) -> dict[str, list]:
    """Every row of the tables a command records in, read without writing."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as connection:
        return {table: connection.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in _RECORDS}


def run_bad_inputs(workspace: Path) -> None:
    recorded = workspace / "recorded"
    bad_inputs.BadInput("", (), "").set_up(recorded)
    store = recorded / "store.sqlite"
    completed = det(store, "experiment", "create", str(recorded / "ok.yaml"), str(recorded), "--test")
    if completed.returncode != 0:
        raise SystemExit(f"could not record the experiment the cases need:\n{completed.stdout}{completed.stderr}")
    clear, tracebacks, recorded_something, wrong = 0, 0, 0, []
    before = records(store)
    started = time.perf_counter()
    for index, case in enumerate(bad_inputs.CASES):
        directory = workspace / f"case-{index}"
        case.set_up(directory)
        argv = case.command_line(directory, store)
        result = subprocess.run([COMMAND, *argv], capture_output=True, text=True, timeout=120)
        output = result.stdout + result.stderr
        if "Traceback" in output:
            tracebacks += 1
        made = [path.name for path in (directory / "new.sqlite", directory / "new-files") if path.exists()]
        changed = records(store) != before
        if made or changed:
            recorded_something += 1
            before = records(store)  # the next case is judged on its own
        if result.returncode == case.status and case.message in output and "Traceback" not in output:
            clear += 1
        else:
            wrong.append((case.name, result.returncode, output.strip().splitlines()[-1:] or [""]))
        if made or changed:
            wrong.append((case.name, result.returncode, [f"recorded: {', '.join(made) or 'the store changed'}"]))
    elapsed = time.perf_counter() - started
    print(f"bad inputs tried:                          {len(bad_inputs.CASES)}")
    print(f"  clear error with the right exit status:  {clear}")
    print(f"  det-estimator traceback shown (goal 0):  {tracebacks}")
    print(f"  something recorded (goal 0):             {recorded_something}")
    print(f"  seconds per case (whole command):        {elapsed / len(bad_inputs.CASES):.2f}")
    for name, status, last in wrong:
        print(f"  NOT CLEAR: {name}: exit {status}: {last[0]}")


def consistent(store: Path, experiment_id: int) -> bool:
    """Every checkpoint the store keeps is on disk, and no validation is recorded twice."""
    checkpoints = json.loads(det(store, "checkpoint", "list", str(experiment_id), "--json").stdout)
    described = json.loads(det(store, "experiment", "describe", str(experiment_id), "--json").stdout)
    on_disk = all(Path(checkpoint["path"]).is_dir() for checkpoint in checkpoints)
    once = all(
        len({v["batches"] for v in trial["validations"]}) == len(trial["validations"]) for trial in described["trials"]
    )
    return on_disk and once and described["state"] != "ACTIVE"


def write_config(directory: Path, batches: int, seconds_per_batch: float = 0.0) -> Path:
    bad_inputs.BadInput("", (), "").set_up(directory)
    raw = bad_inputs.config(searcher=bad_inputs.searcher(max_length={"batches": batches}))
    raw["hyperparameters"]["seconds_per_batch"] = seconds_per_batch
    path = directory / "slow.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def run_concurrent(workspace: Path) -> None:
    results = {}
    # 1. Two resumes of one paused experiment at once.
    directory = workspace / "two-resumes"
    config = write_config(directory, 60, seconds_per_batch=0.05)
    store = directory / "store.sqlite"
    creating = subprocess.Popen(
        [COMMAND, "--store", str(store), "experiment", "create", str(config), str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not store.exists() or det(store, "checkpoint", "list", "1", "--json").stdout.strip() in ("", "[]"):
        time.sleep(1)  # until the first checkpoint is written
    det(store, "experiment", "pause", "1")
    creating.wait(timeout=300)
    resumes = [
        subprocess.Popen(
            [COMMAND, "--store", str(store), "experiment", "resume", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    statuses = sorted(process.wait(timeout=300) for process in resumes)
    results["two resumes of one paused experiment"] = statuses == [0, 2] and consistent(store, 1)

    # 2. Two experiments created at once in one store.
    directory = workspace / "two-creates"
    config = write_config(directory, 20)
    store = directory / "store.sqlite"
    creates = [
        subprocess.Popen(
            [COMMAND, "--store", str(store), "experiment", "create", str(config), str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    statuses = [process.wait(timeout=300) for process in creates]
    results["two experiments created at once in one store"] = statuses == [0, 0] and all(
        consistent(store, experiment_id) for experiment_id in (1, 2)
    )

    # 3. Two stores in one folder: each keeps its own logs.
    directory = workspace / "two-stores"
    config = write_config(directory, 10)
    for name in ("a", "b"):
        det(directory / f"{name}.sqlite", "experiment", "create", str(config), str(directory))
    logs = [
        json.loads(det(directory / f"{name}.sqlite", "experiment", "describe", "1", "--json").stdout)["trials"][0][
            "log_path"
        ]
        for name in ("a", "b")
    ]
    results["two stores in one folder"] = logs[0] != logs[1] and all(
        consistent(directory / f"{name}.sqlite", 1) for name in ("a", "b")
    )

    print(f"concurrent uses tried:                     {len(results)}")
    print(f"  store consistent with the disk after:    {sum(results.values())}")
    for name, ok in results.items():
        print(f"  {'ok' if ok else 'INCONSISTENT'}: {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-concurrent", action="store_true", help="only the bad inputs (fast)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="det-estimator-bad-inputs-") as workspace:
        run_bad_inputs(Path(workspace))
        if not args.skip_concurrent:
            run_concurrent(Path(workspace))


if __name__ == "__main__":
    main()
