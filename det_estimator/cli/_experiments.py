"""The experiment, checkpoint and trial commands."""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from det_estimator.cli._output import format_metrics, format_size, format_time, print_json, print_table
from det_estimator.store import ACTIVE, COMPLETED, ERROR, INTERRUPTED, PAUSED, ExperimentStore

if TYPE_CHECKING:
    from det_estimator.config import ExperimentConfig

# Lines of the trial's output shown in the terminal; the log keeps everything.
PROGRESS_PREFIX = "[det-estimator]"


class UsageError(Exception):
    """A bad command line or config: the command prints the message and exits with 2."""


def create(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Records a new experiment from a config and runs it in the foreground."""
    from det_estimator.config import ConfigError, load_experiment_config
    from det_estimator.config._source import read_source

    context_dir = Path(args.context_dir).resolve()
    if not context_dir.is_dir():
        raise UsageError(f"CONTEXT_DIR {args.context_dir} is not a directory.")
    if not Path(args.config).is_file():
        raise UsageError(f"CONFIG {args.config} is not a file.")
    try:
        raw = dict(read_source(args.config))
        slots = args.slots
        if args.hosts is not None:
            on_hosts = sum(int(entry.partition(":")[2]) for entry in args.hosts.split(","))
            if slots is not None and slots != on_hosts:
                raise UsageError(f"--slots {slots} differs from the {on_hosts} slots of --hosts {args.hosts}.")
            slots = on_hosts
        if slots is not None:
            raw["resources"] = {**(raw.get("resources") or {}), "slots_per_trial": slots}
        if args.seed is not None:
            raw["reproducibility"] = {**(raw.get("reproducibility") or {}), "experiment_seed": args.seed}
        config = load_experiment_config(raw)
    except ConfigError as error:
        raise UsageError(f"{args.config}: {error}") from error
    _check_entrypoint_module(context_dir, config.entrypoint_module)

    experiment_id, trial_id = record_new_experiment(
        store,
        config,
        context_dir,
        name=config.name or Path(args.config).stem,
        entrypoint=config.entrypoint,
        test=args.test,
        hosts=args.hosts,
    )
    _tell(args.json, f"Created experiment {experiment_id} (trial {trial_id}) in {store.path}")
    return run_and_follow(store, experiment_id, json_output=args.json, verbose=args.verbose)


def record_new_experiment(
    store: ExperimentStore,
    config: "ExperimentConfig",
    context_dir: Path,
    name: str,
    entrypoint: str,
    test: bool,
    command: Optional[list[str]] = None,
    hosts: Optional[str] = None,
) -> tuple[int, int]:
    """Records an experiment and its trial in the store; returns their ids.

    The trial's checkpoints go to ``<checkpoint storage>/experiment-<id>-<random>/trial-<n>``:
    the random part keeps two stores (or a store made anew) that share a checkpoint
    storage from ever resuming each other's checkpoints. A relative storage path is
    relative to ``context_dir``, where the trial runs.
    """
    storage = Path(config.checkpoint_storage.checkpoint_directory)
    storage = storage if storage.is_absolute() else context_dir / storage
    experiment_id = store.create_experiment(
        name=name,
        config=config.to_dict(),
        context_dir=str(context_dir),
        entrypoint=entrypoint,
        slots=config.resources.slots_per_trial,
        test=test,
        command=command,
        hosts=hosts,
    )
    seed = config.reproducibility.experiment_seed
    trial_id = store.create_trial(
        experiment_id,
        hparams=config.sample_hyperparameters(seed),
        seed=seed,
        checkpoint_dir=str(storage / f"experiment-{experiment_id}-{uuid.uuid4().hex[:8]}" / "trial-1"),
    )
    return experiment_id, trial_id


def resume(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Continues a paused, interrupted or failed experiment from its latest checkpoint."""
    experiment = store.experiment(args.experiment_id)
    if experiment["state"] not in (PAUSED, INTERRUPTED, ERROR):
        hint = "it is running" if experiment["state"] == ACTIVE else "it has completed"
        raise UsageError(f"Experiment {args.experiment_id} is {experiment['state']}: {hint}; nothing to resume.")
    store.set_state(args.experiment_id, ACTIVE)
    _tell(args.json, f"Resuming experiment {args.experiment_id} from its latest checkpoint")
    return run_and_follow(store, args.experiment_id, json_output=args.json, verbose=args.verbose)


def pause(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Has a running experiment checkpoint and stop; waits until it has."""
    experiment = store.experiment(args.experiment_id)
    if experiment["state"] != ACTIVE:
        raise UsageError(f"Experiment {args.experiment_id} is {experiment['state']}: only an ACTIVE one can be paused.")
    pid = experiment["launcher_pid"]
    if pid is None:
        raise UsageError(f"Experiment {args.experiment_id} is starting; try again in a few seconds.")
    if experiment["launcher_host"] != socket.gethostname():
        raise UsageError(
            f"Experiment {args.experiment_id} was launched on {experiment['launcher_host']}: run "
            f"`det-estimator experiment pause {args.experiment_id}` there."
        )
    os.kill(pid, signal.SIGTERM)
    _tell(args.json, f"Pausing experiment {args.experiment_id}: it finishes its batch and writes a checkpoint")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        experiment = store.experiment(args.experiment_id)
        if experiment["state"] != ACTIVE:
            break
        time.sleep(0.5)
    else:
        print(f"Experiment {args.experiment_id} has not stopped within {args.timeout:.0f} s.", file=sys.stderr)
        return 1
    if args.json:
        print_json({"id": args.experiment_id, "state": experiment["state"]})
    else:
        print(f"Experiment {args.experiment_id} is {experiment['state']}.")
    return 0 if experiment["state"] in (PAUSED, COMPLETED) else 1


def list_experiments(store: ExperimentStore, args: argparse.Namespace) -> int:
    experiments = store.experiments()
    for experiment in experiments:
        experiment["best_validation"] = _best_validation(store, experiment["id"])
    if args.json:
        print_json(experiments)
        return 0
    if not experiments:
        print(f"No experiments yet in {store.path}.")
        return 0
    rows = []
    for e in experiments:
        best = e["best_validation"]
        rows.append(
            [
                e["id"],
                e["name"],
                e["state"],
                f"{e['batches_trained']}/{e['max_batches'] or '?'}",
                e["slots"],
                format_time(e["created_at"]),
                "-" if best is None else f"{best['metric']} {best['value']:.6g}",
            ]
        )
    print_table(["ID", "NAME", "STATE", "BATCHES", "SLOTS", "CREATED", "BEST VALIDATION"], rows)
    return 0


def describe(store: ExperimentStore, args: argparse.Namespace) -> int:
    experiment = store.experiment(args.experiment_id)
    for trial in experiment["trials"]:
        trial["training"] = store.metrics(trial["id"], "training")
        trial["validations"] = store.metrics(trial["id"], "validation")
    experiment["best_validation"] = _best_validation(store, args.experiment_id)
    experiment["checkpoints"] = store.checkpoints(args.experiment_id)
    if args.json:
        print_json(experiment)
        return 0
    fields = [
        ("Experiment", f"{experiment['id']} {experiment['name']}"),
        ("State", experiment["state"]),
        ("Entrypoint", experiment["entrypoint"]),
        ("Context dir", experiment["context_dir"]),
        ("Slots", experiment["slots"]),
        ("Created", format_time(experiment["created_at"])),
        ("Ended", format_time(experiment["ended_at"])),
    ]
    for label, value in fields:
        print(f"{label + ':':<13}{value}")
    for trial in experiment["trials"]:
        print(
            f"\nTrial {trial['id']}: {trial['state']}, {trial['batches_trained']}/{trial['max_batches'] or '?'} "
            f"batches, seed {trial['seed']}"
        )
        print(f"  hyperparameters: {format_metrics(trial['hparams'])}")
        print(f"  checkpoints in:  {trial['checkpoint_dir']}")
        print(f"  log:             {trial['log_path']}")
        if trial["validations"]:
            names = sorted({name for v in trial["validations"] for name in v["metrics"]})
            print("\nValidations:")
            print_table(
                ["BATCHES", *[name.upper() for name in names]],
                [[v["batches"], *[v["metrics"].get(name) for name in names]] for v in trial["validations"]],
            )
    print("\nConfig:")
    print_json(experiment["config"])
    return 0


def plot(store: ExperimentStore, args: argparse.Namespace) -> int:
    from det_estimator.cli._plot import plot_learning_curves

    output = Path(args.output)
    if output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"-o {args.output}: name a .png, .svg or .pdf file.")
    store.experiment(args.experiment_id)  # an unknown id is a usage error before any drawing
    panels = plot_learning_curves(store, args.experiment_id, output)
    if args.json:
        print_json({"id": args.experiment_id, "output": str(output.resolve()), "panels": panels})
    else:
        print(f"Wrote {len(panels)} learning curves ({', '.join(panels)}) to {output}")
    return 0


def list_checkpoints(store: ExperimentStore, args: argparse.Namespace) -> int:
    store.experiment(args.experiment_id)  # an unknown id is a usage error, not an empty list
    checkpoints = store.checkpoints(args.experiment_id, include_deleted=args.all)
    if args.json:
        print_json(checkpoints)
        return 0
    if not checkpoints:
        print(f"Experiment {args.experiment_id} has no checkpoints.")
        return 0
    rows = [
        [
            c["uuid"],
            c["batches"],
            c["state"],
            format_metrics(c["validation_metrics"]),
            format_size(c["size_bytes"]),
            c["path"],
        ]
        for c in checkpoints
    ]
    print_table(["UUID", "BATCHES", "STATE", "VALIDATION METRICS", "SIZE", "PATH"], rows)
    return 0


def trial_logs(store: ExperimentStore, args: argparse.Namespace) -> int:
    trial = store.trial(args.trial_id)
    log = Path(trial["log_path"])
    if not log.exists():
        print(f"Trial {args.trial_id} has no log yet ({log}).", file=sys.stderr)
        return 1
    with log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            sys.stdout.write(line)
    return 0


def _check_entrypoint_module(context_dir: Path, module: str) -> None:
    relative = Path(*module.split("."))
    if not (
        (context_dir / relative).with_suffix(".py").is_file() or (context_dir / relative / "__init__.py").is_file()
    ):
        raise UsageError(
            f"The config's entrypoint module {module!r} is not in CONTEXT_DIR {context_dir}: expected "
            f"{relative.with_suffix('.py')} there."
        )


def _best_validation(store: ExperimentStore, experiment_id: int) -> Optional[dict[str, Any]]:
    """The best value of the searcher's metric over the experiment's validations."""
    experiment = store.experiment(experiment_id)
    searcher = experiment["config"]["searcher"]
    metric, smaller = searcher["metric"], searcher.get("smaller_is_better", True)
    best = None
    for trial in experiment["trials"]:
        for validation in store.metrics(trial["id"], "validation"):
            value = validation["metrics"].get(metric)
            if isinstance(value, (int, float)) and (best is None or (value < best["value"]) == smaller):
                best = {"metric": metric, "value": value, "batches": validation["batches"], "trial_id": trial["id"]}
    return best


def _tell(json_output: bool, message: str) -> None:
    """Progress for people: on stderr when stdout carries JSON."""
    print(message, file=sys.stderr if json_output else sys.stdout, flush=True)


def run_and_follow(store: ExperimentStore, experiment_id: int, json_output: bool = False, verbose: bool = False) -> int:
    """Runs the experiment in a child process, logging all its output and showing its progress.

    Returns the exit status for the command: 0 when the experiment completed or paused
    (a summary is printed), 1 when it failed (the end of its output is printed).
    """
    trial = store.experiment(experiment_id)["trials"][0]
    log_path = Path(trial["log_path"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    child = subprocess.Popen(
        [sys.executable, "-m", "det_estimator.cli._runner", str(store.path), str(experiment_id)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
    )

    def forward_pause(signum: int, frame: Any) -> None:
        # Ctrl-C in a terminal reaches the child too; a signal sent to this process alone
        # is passed on. Either way the child checkpoints and stops, and we keep following.
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        _tell(json_output, "Pausing: the trial finishes its batch and writes a checkpoint...")

    previous = {sig: signal.signal(sig, forward_pause) for sig in (signal.SIGINT, signal.SIGTERM)}
    shown = sys.stderr if json_output else sys.stdout
    try:
        with log_path.open("a", encoding="utf-8") as log:
            for line in child.stdout:
                log.write(line)
                log.flush()
                if verbose or line.startswith(PROGRESS_PREFIX):
                    shown.write(line)
                    shown.flush()
        status = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    experiment = store.experiment(experiment_id)
    if status != 0:
        if not verbose:
            lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
            first = first_traceback(lines)
            if first:
                # Usually the cause; later tracebacks are the other ranks being shut down.
                print("The first error:\n" + "\n".join(first) + "\n\nThe end of the output:", file=sys.stderr)
            print("\n".join(lines[-15:]), file=sys.stderr)
        print(
            f"\nExperiment {experiment_id} failed ({experiment['state']}). Its whole output: "
            f"det-estimator trial logs {trial['id']}  ({log_path})",
            file=sys.stderr,
        )
        return 1
    _summarize(store, experiment_id, json_output)
    return 0


def first_traceback(lines: list[str]) -> list[str]:
    """The first Python traceback in a job's output, down to its exception line.

    horovodrun prefixes each worker's lines with ``[rank]<stderr>:``; lines of other
    ranks interleaved with the traceback are skipped.
    """
    for index, line in enumerate(lines):
        if "Traceback (most recent call last)" not in line:
            continue
        prefix = line[: line.index("Traceback")]
        block = [line]
        for following in lines[index + 1 :]:
            if not following.startswith(prefix):
                continue
            block.append(following)
            body = following[len(prefix) :]
            if body and not body[0].isspace():  # "SomeError: message" ends a traceback
                break
        return block
    return []


def _summarize(store: ExperimentStore, experiment_id: int, json_output: bool) -> None:
    experiment = store.experiment(experiment_id)
    trial = experiment["trials"][0]
    best = _best_validation(store, experiment_id)
    checkpoints = store.checkpoints(experiment_id)
    for checkpoint in checkpoints:
        saved_models = Path(checkpoint["path"]) / "saved_models"
        checkpoint["saved_models"] = (
            {p.name: str(p) for p in sorted(saved_models.iterdir())} if saved_models.is_dir() else {}
        )
    summary = {
        "id": experiment_id,
        "state": experiment["state"],
        "batches_trained": trial["batches_trained"],
        "max_batches": trial["max_batches"],
        "best_validation": best,
        "checkpoints": checkpoints,
    }
    if json_output:
        print_json(summary)
        return
    print(f"\nExperiment {experiment_id} {experiment['state']} after {trial['batches_trained']} batches.")
    if best is not None:
        print(f"Best validation: {best['metric']} {best['value']:.6g} after {best['batches']} batches.")
    print(f"Checkpoints kept ({len(checkpoints)}):")
    for checkpoint in checkpoints:
        print(f"  {checkpoint['uuid']}  batches {checkpoint['batches']}  {checkpoint['path']}")
        for name, path in checkpoint["saved_models"].items():
            print(f"    SavedModel {name!r}: {path}")
    if experiment["state"] == PAUSED:
        print(f"Resume with: det-estimator experiment resume {experiment_id}")
