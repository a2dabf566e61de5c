"""Faults survived, hangs, and seconds from a rank's death to the job's end: one host and two hosts.

Each scenario runs ``det-estimator experiment create`` on the analytic trial (2 ranks) with
one fault injected once (tests/recovery/fault_trial.py), then checks that the trial ends
at the closed-form weight:

- ``raise``: rank 1 raises in training; the automatic restart (``max_restarts: 5``) survives it;
- ``kill in training`` / ``kill in evaluation`` / ``kill in checkpoint``: a rank SIGKILLed
  in training, during evaluation (the other rank waits in the metrics' allgather) and while
  the chief writes a checkpoint; the automatic restart survives it;
- ``host dies`` (two hosts only): every process of the second host SIGKILLed, its sshd too
  (``max_restarts: 0``); the host comes back and ``experiment resume`` finishes the trial.

Then, on one host, failures a restart would only repeat (``max_restarts: 5``), each with
the runs it took and the seconds from its first fault to the trial's end:

- ``same failure every run``: rank 1 raises at batch 12 of every run; one restart, then the
  trial ends, as its second run failed as the first did;
- ``failure before any batch``: the trial raises as it is built; it ends after one run;
- ``import error``: the trial's module imports a module that does not exist; it ends after
  one run.

Last, a hang (one host, 2 slots, ``hang_timeout_seconds: 10``, ``max_restarts: 5``): rank 1
wedges in a reducer's cross-worker step at every validation, rank 0 waits for it. The
launcher must find it, have both ranks dump their stacks into the log, and end the run
within the timeout plus 30 s of the wedge; the hang is restarted once, then ends the trial
as the second run hung at the same places. Printed: the runs, whether the first run's
error is a hang, whether both ranks' stacks are in the log, and the seconds from the first
wedge to the first run's end.

"Seconds to end" is from the rank's death (the fault's marker file, written just before
it strikes; or the kill of the host) to the failed run's end as recorded in the store.
A scenario whose command does not end within ``--timeout`` seconds counts as a hang.
Two hosts are two network namespaces with an sshd each (tests/distributed/two_hosts_support.py):
they need root and openssh-server, else that half is skipped with the reason.

Usage: ``.venv/bin/python benchmarks/faults.py [--timeout 300] [--only one|two|repeated|hang]``
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
LEARNING_RATE, GLOBAL_BATCH, BATCHES = 0.01, 8, 30


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def expected_weight(batches: int) -> float:
    """The analytic trial's closed form (tests/support/analytic_trial.py), without importing TensorFlow."""
    import numpy as np

    records = 64
    features = 1.0 + 0.1 * (np.arange(records) % 7)
    targets = 3.0 * features.astype(np.float32) + 0.05 * (np.arange(records) % 3)
    features, targets = features.astype(np.float32).astype(np.float64), targets.astype(np.float32).astype(np.float64)
    weight, per_epoch = 0.0, records // GLOBAL_BATCH
    for step in range(batches):
        start = (step % per_epoch) * GLOBAL_BATCH
        x, y = features[start : start + GLOBAL_BATCH], targets[start : start + GLOBAL_BATCH]
        weight -= LEARNING_RATE * np.mean(2.0 * (weight * x - y) * x)
    return float(weight)


@dataclass
class Outcome:
    scenario: str
    restarts: int = 0
    survived: bool = False
    hung: bool = False
    seconds_to_end: Optional[float] = None
    note: str = ""
    kill: bool = field(default=True)


class Runner:
    """Runs the command on a store and a context dir of its own, optionally inside a namespace."""

    def __init__(self, directory: Path, timeout: float, hosts=None) -> None:
        self.directory = directory
        self.timeout = timeout
        self.hosts = hosts
        self.context = directory / "context"
        self.context.mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "support" / "analytic_trial.py", self.context)
        shutil.copy(ROOT / "tests" / "support" / "analytic_closed_form.py", self.context)
        shutil.copy(ROOT / "tests" / "recovery" / "fault_trial.py", self.context)
        self.store = directory / "store.sqlite"

    def command(self, *args: str) -> list[str]:
        command = [COMMAND, "--store", str(self.store), *args]
        return command if self.hosts is None else self.hosts.command_in(self.hosts.a, command)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("DET_ESTIMATOR_STORE", None)
        return env if self.hosts is None else self.hosts.env(env)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args),
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait(self, process: subprocess.Popen) -> bool:
        """False when the command hangs (it is then killed)."""
        try:
            process.wait(timeout=self.timeout)
            return True
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            return False

    def json(self, *args: str):
        result = subprocess.run(self.command(*args, "--json"), env=self.env(), capture_output=True, text=True)
        return json.loads(result.stdout)

    def config(
        self,
        name: str,
        fault: Optional[dict],
        max_restarts: int,
        seconds_per_batch: float = 0.0,
        entrypoint: str = "fault_trial:FaultTrial",
        **changes: object,
    ) -> Path:
        import yaml

        hparams = {"global_batch_size": GLOBAL_BATCH, "learning_rate": LEARNING_RATE, "events_dir": "events"}
        if fault:
            hparams["fault"] = fault
        if seconds_per_batch:
            hparams["seconds_per_batch"] = seconds_per_batch
        for key in [key for key in changes if key.startswith("hparam_")]:
            hparams[key.removeprefix("hparam_")] = changes.pop(key)
        raw = {
            "name": name,
            "entrypoint": entrypoint,
            "hyperparameters": hparams,
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": BATCHES}},
            "scheduling_unit": 5,
            "min_validation_period": {"batches": 5},
            "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints"},
            "reproducibility": {"experiment_seed": 1},
            "max_restarts": max_restarts,
            **changes,
        }
        path = self.context / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        return path


def _trial(runner: Runner) -> dict:
    experiment = runner.json("experiment", "list")[-1]
    (trial,) = runner.json("experiment", "describe", str(experiment["id"]))["trials"]
    return {"experiment": experiment, **trial}


def _at_closed_form(trial: dict) -> bool:
    if trial["state"] != "COMPLETED" or not trial["validations"]:
        return False
    last = trial["validations"][-1]
    expected = expected_weight(BATCHES)
    return last["batches"] == BATCHES and abs(last["metrics"]["weight"] - expected) <= 1e-5 * abs(expected)


def injected(runner: Runner, name: str, fault: dict, placement: list[str]) -> Outcome:
    marker = runner.directory / f"{name.replace(' ', '-')}.struck"
    config = runner.config(name.replace(" ", "-"), {**fault, "once": str(marker)}, max_restarts=5)
    process = runner.start("experiment", "create", str(config), str(runner.context), *placement)
    outcome = Outcome(name, kill=fault["kind"] != "raise")
    outcome.hung = not runner.wait(process)
    trial = _trial(runner)
    outcome.restarts = trial["restarts"]
    outcome.survived = _at_closed_form(trial) and outcome.restarts == 1
    failed = [run for run in trial["runs"] if run["state"] == "ERROR"]
    if marker.exists() and failed and failed[0]["ended_at"]:
        outcome.seconds_to_end = failed[0]["ended_at"] - marker.stat().st_mtime
    else:
        outcome.note = "the fault did not strike" if not marker.exists() else "no failed run recorded"
    return outcome


def host_dies(runner: Runner) -> Outcome:
    hosts = runner.hosts
    config = runner.config("host-dies", None, max_restarts=0, seconds_per_batch=0.1)
    process = runner.start("experiment", "create", str(config), str(runner.context), "--hosts", hosts.hosts)
    outcome = Outcome("host dies")
    deadline = time.monotonic() + runner.timeout
    checkpoint_dir = None
    while time.monotonic() < deadline and process.poll() is None:
        listed = runner.json("experiment", "list")
        if listed:
            checkpoints = runner.json("checkpoint", "list", str(listed[-1]["id"]))
            if checkpoints:
                checkpoint_dir = checkpoints[0]["path"]
                break
        time.sleep(0.5)
    if checkpoint_dir is None:
        runner.wait(process)
        outcome.note = "no checkpoint before the end"
        return outcome
    killed_at = hosts.kill_host(hosts.b)
    outcome.hung = not runner.wait(process)
    trial = _trial(runner)
    failed = [run for run in trial["runs"] if run["state"] == "ERROR"]
    if failed and failed[0]["ended_at"]:
        outcome.seconds_to_end = failed[0]["ended_at"] - killed_at
    hosts.start_sshd(hosts.b)
    resume = runner.start("experiment", "resume", str(trial["experiment"]["id"]))
    outcome.hung = outcome.hung or not runner.wait(resume)
    outcome.survived = _at_closed_form(_trial(runner))
    return outcome


def scenarios(runner: Runner, placement: list[str]) -> list[Outcome]:
    faults = [
        ("raise", {"kind": "raise", "rank": 1, "batch": 12}),
        ("kill in training", {"kind": "kill_in_training", "rank": 1, "batch": 12}),
        ("kill in evaluation", {"kind": "kill_in_evaluation", "rank": 1, "evaluation": 3}),
        ("kill in checkpoint", {"kind": "kill_in_checkpoint", "rank": 0, "checkpoint": 2}),
    ]
    outcomes = []
    for name, fault in faults:
        outcomes.append(injected(runner, name, fault, placement))
        print(f"  {name}: {outcomes[-1]}", flush=True)
    if runner.hosts is not None:
        outcomes.append(host_dies(runner))
        print(f"  host dies: {outcomes[-1]}", flush=True)
    return outcomes


# A trial module whose import fails (after the command's check of the entrypoint found its class);
# it writes the time of the fault beside itself first.
_BROKEN_IMPORT = """
import time
from pathlib import Path

with open(Path(__file__).with_suffix(".marks"), "a") as marks:
    marks.write(f"{time.time()}\\n")
import no_such_module_of_the_fault_benchmark  # noqa: F401,E402

import det_estimator as det  # noqa: E402


class Trial(det.EstimatorTrial):  # what the command's check of the entrypoint reads; never reached
    def build_estimator(self):
        pass

    def build_train_spec(self):
        pass

    def build_validation_spec(self):
        pass
"""


def _first_mark(path: Path) -> Optional[float]:
    """The first time a fault wrote into ``path``, or None when it never struck."""
    lines = path.read_text().split() if path.exists() else []
    return float(lines[0]) if lines else None


def not_retried(runner: Runner, name: str, fault: Optional[dict], entrypoint: str = "fault_trial:FaultTrial") -> str:
    """A failure that repeats: how many runs it took and how long from its first fault to the trial's end."""
    marks = runner.directory / f"{name.replace(' ', '-')}.marks"
    if fault is None:  # the fault is the entrypoint's module itself
        module = entrypoint.split(":")[0]
        (runner.context / f"{module}.py").write_text(_BROKEN_IMPORT)
        marks = runner.context / f"{module}.marks"
    else:
        fault = {**fault, "marks": str(marks)}
    config = runner.config(name.replace(" ", "-"), fault, max_restarts=5, entrypoint=entrypoint)
    process = runner.start("experiment", "create", str(config), str(runner.context), "--slots", "2")
    if not runner.wait(process):
        return f"  {name}: hung (killed after {runner.timeout:.0f} s)"
    finished = time.time()
    trial = _trial(runner)
    runs = trial["runs"]
    struck = _first_mark(marks)
    # A fault the command finds before it launches anything ends with the command.
    ended = runs[-1]["ended_at"] if runs and runs[-1]["ended_at"] else finished
    seconds = ended - struck if struck else float("nan")
    return f"  {name}: {len(runs)} run(s), {trial['restarts']} restart(s), {seconds:.1f} s from its fault to the end"


HANG_TIMEOUT_SECONDS = 10


def hang(runner: Runner) -> str:
    """A rank wedged in a reducer: found, stacks dumped, ended within the timeout plus 30 s of the wedge."""
    config = runner.config(
        "hang",
        None,
        max_restarts=5,
        hang_timeout_seconds=HANG_TIMEOUT_SECONDS,
        hparam_sleeping_reducer_rank=1,
    )
    process = runner.start("experiment", "create", str(config), str(runner.context), "--slots", "2")
    if not runner.wait(process):
        return f"  hang: not found (the command was killed after {runner.timeout:.0f} s)"
    trial = _trial(runner)
    runs = trial["runs"]
    first = runs[0] if runs else {}
    error = first.get("error") or {}
    log = Path(trial["log_path"]).read_text(encoding="utf-8", errors="replace")
    dumped = all(f"Python stacks of rank {rank} (most recent call first)" in log for rank in (0, 1))
    wedged = _first_mark(runner.context / "events" / "wedged-rank1")
    seconds = first["ended_at"] - wedged if wedged and first.get("ended_at") else float("nan")
    within = seconds <= HANG_TIMEOUT_SECONDS + 30
    return (
        f"  hang (hang_timeout_seconds {HANG_TIMEOUT_SECONDS}): {len(runs)} run(s), {trial['restarts']} restart(s), "
        f"found as a hang: {error.get('kind') == 'hang'}, both ranks' stacks in the log: {dumped}, "
        f"{seconds:.1f} s from the wedge to the run's end (within the timeout + 30 s: {within})"
    )


def summary(label: str, outcomes: list[Outcome]) -> list[str]:
    seconds = [o.seconds_to_end for o in outcomes if o.seconds_to_end is not None]
    return [
        label,
        str(sum(o.restarts for o in outcomes if o.survived)),
        f"{sum(o.survived for o in outcomes if o.kill)}/{sum(o.kill for o in outcomes)}",
        str(sum(o.hung for o in outcomes)),
        f"{max(seconds):.1f}" if seconds else "-",
        f"{sum(o.survived for o in outcomes)}/{len(outcomes)}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a command counts as hung")
    parser.add_argument(
        "--only",
        choices=("one", "two", "repeated", "hang"),
        help="run one part only: faults on one host or two, failures not retried, or the hang",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # two_hosts_support imports tests.conftest
    two = _load("two_hosts_support", ROOT / "tests" / "distributed" / "two_hosts_support.py")
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="det-faults-") as scratch:
        scratch = Path(scratch)
        if args.only in (None, "one"):
            print("one host (localhost, 2 slots):", flush=True)
            runner = Runner(scratch / "one", args.timeout)
            rows.append(summary("one host, 2 slots", scenarios(runner, ["--slots", "2"])))
        if args.only in (None, "two"):
            reason = two.unavailable()
            if reason is not None:
                notes.append(f"two hosts skipped: {reason}")
            else:
                print("two hosts (network namespaces, 1 slot each):", flush=True)
                with two.two_hosts(scratch / "hosts") as hosts:
                    runner = Runner(scratch / "two", args.timeout, hosts)
                    rows.append(summary("two hosts, 1 slot each", scenarios(runner, ["--hosts", hosts.hosts])))
        repeated, hung = [], None
        if args.only in (None, "one", "repeated"):
            print("failures a restart would only repeat (one host, 2 slots, max_restarts 5):", flush=True)
            runner = Runner(scratch / "repeated", args.timeout)
            repeated.append(not_retried(runner, "same failure every run", {"kind": "raise", "rank": 1, "batch": 12}))
            repeated.append(not_retried(runner, "failure before any batch", {"kind": "raise_at_start"}))
            repeated.append(not_retried(runner, "import error", None, entrypoint="broken_import:Trial"))
        if args.only in (None, "one", "hang"):
            print("a hang (one host, 2 slots, max_restarts 5):", flush=True)
            hung = hang(Runner(scratch / "hang", args.timeout))
    header = ["setting", "restarts survived", "kills survived", "hangs", "max s death->end", "closed form"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print()
    if rows:
        for row in [header, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    if repeated:
        print("\nfailures not retried:")
        for line in repeated:
            print(line)
    if hung is not None:
        print("\na hang:")
        print(hung)
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
