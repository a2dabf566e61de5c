"""The experiment, checkpoint and trial commands: thin front ends over orchestration and the store."""

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from det_estimator import launcher, orchestration
from det_estimator.checkpoint._fs import outermost_missing, remove_empty_folders
from det_estimator.cli._config_warnings import config_warnings
from det_estimator.cli._entrypoint import (
    EntrypointError,
    check_program,
    check_script_entrypoint,
    check_trial_entrypoint,
    derives_from_estimator_trial,
)
from det_estimator.cli._output import format_time, print_log, print_table
from det_estimator.config import ExperimentConfig, grid_size
from det_estimator.errors import DetEstimatorError
from det_estimator.lifecycle import remove_leftovers
from det_estimator.orchestration import format_metrics, print_json
from det_estimator.orchestration._processes import device_type
from det_estimator.store import (
    BestValidation,
    ExperimentBusyError,
    ExperimentStore,
    LogOwner,
    MetricKind,
    State,
    TrialRecord,
    to_json_value,
)


class UsageError(DetEstimatorError):
    """A bad command line or config: the command prints the message and exits with 2."""


def create(open_store: Callable[[], ExperimentStore], args: argparse.Namespace) -> int:
    """Records a new experiment from a config and runs it in the foreground.

    The store is opened (made, at a new path) only once the command line and the config
    are accepted, so that a refused command leaves nothing behind.
    """
    from det_estimator.config import ConfigError, load_experiment_config

    context_dir = check_context_dir(args.config, args.context_dir, "experiment create")
    check_config_file(args.config, context_dir)
    try:
        config = load_experiment_config(args.config)
        if args.seed is not None:
            config = config.with_overrides(seed=args.seed)
        slots = args.slots
        if args.hosts is None:
            # Before the config is checked with --slots: more slots than the global batch size
            # is refused there too, which says less about what is wrong.
            check_slots_fit_this_machine(
                config.resources.slots_per_trial if slots is None else slots, "resources.slots_per_trial"
            )
        else:
            on_hosts = sum(entry.slots for entry in args.hosts)
            if slots is not None and slots != on_hosts:
                raise UsageError(
                    f"--slots {slots} differs from the {on_hosts} slots of --hosts {launcher.format_hosts(args.hosts)}."
                )
            slots = on_hosts
        if slots is not None and config.searcher.name == "single":
            # One trial: the slots are its processes. A search shares them among its trials.
            config = config.with_overrides(slots=slots)
        elif slots is not None and slots < config.resources.slots_per_trial:
            raise UsageError(
                f"--slots {slots} is fewer than one trial needs: resources.slots_per_trial is "
                f"{config.resources.slots_per_trial}."
            )
    except ConfigError as error:
        raise UsageError(f"{args.config}: {error}") from error
    try:
        if config.is_script:
            check_script_entrypoint(context_dir, list(config.entrypoint_command))
            if args.hosts is None:  # other hosts may have other programs on their PATH
                environment = config.environment.variables_for(device_type())
                check_program(context_dir, list(config.entrypoint_command), environment, "The config's entrypoint")
        else:
            check_trial_entrypoint(context_dir, config.entrypoint_module, config.entrypoint_class)
    except EntrypointError as error:
        raise UsageError(f"{args.config}: {error}") from error
    if args.hosts is not None:
        try:
            launcher.check_hosts(args.hosts)
        except ValueError as error:
            raise UsageError(f"--hosts: {error}") from None
        here = launcher.slots_on_this_machine(args.hosts)
        asked = f"--hosts {launcher.format_hosts(args.hosts)} gives this machine {here} slots"
        check_slots_fit_this_machine(here, "resources.slots_per_trial", hosts_option=False, asked=asked)
    # After the hosts: a host that cannot be reached is wrong on any stack.
    trial_processes = config.resources.slots_per_trial
    if (
        not config.is_script
        and (trial_processes > 1 or args.hosts is not None)
        and not launcher.horovod_installed()
        and derives_from_estimator_trial(context_dir, config.entrypoint_module, config.entrypoint_class)
    ):
        # A TFKerasTrial runs under the TensorFlow launcher there; an EstimatorTrial only under Horovod.
        raise UsageError(
            f"{args.config}: an EstimatorTrial on several processes (resources.slots_per_trial {trial_processes}"
            f"{', --hosts' if args.hosts is not None else ''}) runs under Horovod, which is not installed here. Run "
            "it on one slot, or on the estimator stack with Horovod (bash scripts/setup.sh)."
        )
    storage = orchestration.checkpoint_storage_root(config, str(context_dir))
    made = outermost_missing(storage)
    _check_checkpoint_storage(storage, args.config)
    for warning in config_warnings(config):
        print(f"det-estimator: warning: {warning}", file=sys.stderr, flush=True)
    if args.test:
        # One trial of one batch, whatever the searcher, as the reference's test mode: else a
        # search would run all of its trials, and a Core API script, which trains to the
        # length its searcher operations give, to max_length. The trial keeps its slots and
        # seed, hence its hyperparameters.
        try:
            config = config.with_overrides(test=True)
        except ConfigError as error:
            raise UsageError(f"{args.config}: {error}") from error
    with contextlib.ExitStack() as opened:
        try:
            store = opened.enter_context(open_store())
            experiment_id = orchestration.record_experiment(
                store,
                config,
                str(context_dir),
                name=config.name or Path(args.config).stem,
                test=args.test,
                hosts=args.hosts,
                slots=slots,
            )
        except BaseException:
            # A store that cannot be opened, or that refuses the experiment (a folder of another
            # store): what the check of the checkpoint storage made goes, as nothing is recorded.
            remove_empty_folders(storage, made)
            raise
        trial_id = store.trials(experiment_id)[0].id
        _tell(args.json, f"Created experiment {experiment_id} ({_what_it_runs(config, trial_id)}) in {store.location}")
        return _run(store, experiment_id, args, config)


def _what_it_runs(config: ExperimentConfig, first_trial_id: int) -> str:
    """The trial of a single-trial experiment, or how many trials a search has: a grid's count is easy to misjudge."""
    searcher = config.searcher
    if searcher.name == "single":
        return f"trial {first_trial_id}"
    trials = grid_size(config.hyperparameters) if searcher.name == "grid" else searcher.max_trials
    return f"{searcher.name} search of {trials:,} trial{'' if trials == 1 else 's'}"


def resume(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Continues a paused, interrupted or failed experiment from its latest checkpoint."""
    experiment = store.experiment(args.experiment_id)
    try:
        orchestration.check_resumable(experiment, orchestration.command_on(store.location))
    except orchestration.ActionRefusedError as error:
        raise UsageError(str(error)) from None
    if experiment.hosts:
        # A host still down would fail every restart of the run in turn.
        try:
            launcher.check_hosts(experiment.hosts)
        except ValueError as error:
            raise UsageError(
                f"Experiment {args.experiment_id} runs on --hosts {launcher.format_hosts(experiment.hosts)}: {error} "
                "Resume it once every host is back."
            ) from None
    _check_code_is_there(experiment)
    _tell(args.json, f"Resuming experiment {args.experiment_id} from its latest checkpoint")
    return _run(store, args.experiment_id, args)


def _check_code_is_there(experiment: Any) -> None:
    """Refuses to resume an experiment whose CONTEXT_DIR, or entrypoint module in it, is gone.

    Its processes would start there and fail on every restart, and the experiment would
    end as ERROR; moving the code back lets it resume as it was.
    """
    context_dir = Path(experiment.context_dir)
    where = f"Experiment {experiment.id} runs its code in {context_dir}"
    if not context_dir.is_dir():
        raise UsageError(
            f"{where}, which is no longer a directory. Put its code back there to resume it (or create a new "
            "experiment from where the code is now)."
        )
    entrypoint = experiment.config.get("entrypoint")
    # A trial class named by the config (run_trial's and det.init's runs have a run_key: they resume by running again).
    created_by_command = experiment.trial_class is None and experiment.command is None and experiment.run_key is None
    if created_by_command and isinstance(entrypoint, str):
        module, _, class_name = entrypoint.partition(":")
        try:
            check_trial_entrypoint(context_dir, module, class_name)
        except EntrypointError as error:
            raise UsageError(f"{where}: {error} Put its code back there to resume it.") from error


def _run(
    store: ExperimentStore, experiment_id: int, args: argparse.Namespace, config: Optional[ExperimentConfig] = None
) -> int:
    try:
        return orchestration.run_and_report(
            store, experiment_id, json_output=args.json, verbose=args.verbose, config=config
        )
    except ExperimentBusyError as error:
        raise UsageError(str(error)) from error


def pause(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Asks a running experiment to checkpoint and stop; waits until it has.

    The request goes through the store, so it works from any machine that sees the
    store, whichever machine runs the experiment.
    """
    try:
        experiment = orchestration.request_pause(store, args.experiment_id)
    except orchestration.ActionRefusedError as error:
        raise UsageError(str(error)) from None
    _tell(args.json, f"Pausing experiment {args.experiment_id}: it finishes its batch and writes a checkpoint")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        experiment = store.experiment(args.experiment_id)
        if experiment.state != State.ACTIVE:
            break
        time.sleep(0.5)
    else:
        print(f"Experiment {args.experiment_id} has not stopped within {args.timeout:.0f} s.", file=sys.stderr)
    if args.json:  # a timeout included: a script reading stdout learns the state it was left in
        print_json({"id": args.experiment_id, "state": experiment.state}, sys.stdout)
    elif experiment.state != State.ACTIVE:
        print(f"Experiment {args.experiment_id} is {experiment.state}.")
    return 0 if experiment.state in (State.PAUSED, State.COMPLETED) else 1


def _best_text(best: Optional[BestValidation]) -> str:
    return "-" if best is None else f"{best.metric} {best.value:.6g}"


def list_experiments(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Every experiment: id, name, state, progress and best validation."""
    experiments = store.experiments()
    # What killed checkpoint writes left in experiments that no longer run goes, rather than
    # waiting for a resume that may never come.
    remove_leftovers(store, experiments, store.all_trials())
    best = store.best_validations(experiments)
    if args.json:
        print_json([{**to_json_value(e), "best_validation": best[e.id]} for e in experiments], sys.stdout)
        return 0
    if not experiments:
        print(f"No experiments yet in {store.location}.")
        return 0
    rows = [
        [
            e.id,
            e.name,
            e.state,
            e.num_trials,
            _progress(e),
            e.slots,
            format_time(e.created_at),
            _best_text(best[e.id]),
        ]
        for e in experiments
    ]
    print_table(["ID", "NAME", "STATE", "TRIALS", "BATCHES", "SLOTS", "CREATED", "BEST VALIDATION"], rows)
    return 0


def _progress(experiment: Any) -> str:
    """Batches done of the length, for one trial; the batches of all trials, for a search."""
    if experiment.is_search:
        return str(experiment.batches_trained)
    return batches_of(experiment.batches_trained, experiment.max_batches, short=True)


def batches_of(batches: int, length: Optional[int], short: bool = False) -> str:
    """``10/20`` batches trained of the length, as ``list`` and ``describe`` show them.

    A trial learns its length when its training starts: one that has not started is
    said to be so (``0 (not started)``), and a script that trains to a length of its
    own, without the searcher's operations, shows the batches it has trained.
    """
    if length:
        shown = f"{batches}/{length}"
    elif batches:
        shown = str(batches)
    else:
        return "0 (not started)" if short else "0 batches (training not started)"
    return shown if short else f"{shown} batches"


def _ranked(store: ExperimentStore, experiment_id: int) -> list[tuple[TrialRecord, Any]]:
    """The experiment's trials with their best validation, best first (trials never validated last)."""
    experiment = store.experiment(experiment_id)
    sign = 1.0 if experiment.smaller_is_better else -1.0
    trials = [(trial, store.best_validation(experiment_id, trial.id)) for trial in store.trials(experiment_id)]
    return sorted(trials, key=lambda pair: (pair[1] is None, sign * pair[1].value if pair[1] else 0.0, pair[0].id))


def trial_json(store: ExperimentStore, trial: TrialRecord, with_metrics: bool) -> dict[str, Any]:
    """A trial as ``--json`` shows it: its record, where its TensorBoard files are, its runs (and its metrics)."""
    shown = {**to_json_value(trial), "tensorboard_dir": trial.tensorboard_dir}
    shown["runs"] = to_json_value(store.trial_runs(trial.id))
    shown["restart_causes"] = to_json_value(store.restarts(trial.id))
    if with_metrics:
        for key, kind in (("training", MetricKind.TRAINING), ("validations", MetricKind.VALIDATION)):
            shown[key] = [{"batches": m.batches, "metrics": m.metrics} for m in store.metrics(trial.id, kind)]
    return shown


def describe(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Config, hyperparameters, state and every validation of an experiment."""
    experiment = store.experiment(args.experiment_id)
    ranked = _ranked(store, args.experiment_id)
    trials = [trial for trial, _ in ranked]
    best = store.best_validation(args.experiment_id)
    if args.json:
        shown = to_json_value(experiment)
        shown["trials"] = [
            {**trial_json(store, trial, with_metrics=True), "best_validation": to_json_value(trial_best)}
            for trial, trial_best in ranked
        ]
        shown["best_validation"] = best
        shown["checkpoints"] = store.checkpoints(args.experiment_id)
        print_json(shown, sys.stdout)
        return 0
    fields = [
        ("Experiment", f"{experiment.id} {experiment.name}"),
        ("State", experiment.state),
        ("Entrypoint", experiment.entrypoint),
        ("Context dir", experiment.context_dir),
        ("Slots", experiment.slots),
        ("Created", format_time(experiment.created_at)),
        ("Ended", format_time(experiment.ended_at)),
    ]
    if best is not None:
        fields.append(("Best", f"{best.metric} {best.value:.6g} after {best.batches} batches (trial {best.trial_id})"))
    for label, value in fields:
        print(f"{label + ':':<13}{value}")
    if len(trials) > 1:
        print(f"\nTrials, best first by {experiment.searcher_metric}:")
        _print_trials(ranked)
    for trial in trials:
        _describe_trial(store, trial)
    print("\nConfig:")
    print_json(experiment.config, sys.stdout)
    return 0


def _print_trials(ranked: list[tuple[TrialRecord, Any]]) -> None:
    rows = [
        [
            trial.id,
            trial.state,
            trial.search_state or "-",
            trial.batches_trained,
            "-" if best is None else f"{best.value:.6g}",
            format_metrics(trial.hparams) or "-",
        ]
        for trial, best in ranked
    ]
    print_table(["TRIAL", "STATE", "SEARCH", "BATCHES", "BEST", "HYPERPARAMETERS"], rows)


def list_trials(store: ExperimentStore, args: argparse.Namespace) -> int:
    """An experiment's trials, best first: state, place in the search, batches, best validation, hyperparameters."""
    ranked = _ranked(store, args.experiment_id)
    if args.json:
        print_json(
            [{**trial_json(store, trial, with_metrics=False), "best_validation": best} for trial, best in ranked],
            sys.stdout,
        )
        return 0
    _print_trials(ranked)
    return 0


def describe_trial(store: ExperimentStore, args: argparse.Namespace) -> int:
    """One trial: hyperparameters, state, runs, validations."""
    trial = store.trial(args.trial_id)
    if args.json:
        shown = trial_json(store, trial, with_metrics=True)
        shown["best_validation"] = store.best_validation(trial.experiment_id, trial.id)
        shown["checkpoints"] = store.checkpoints(trial.experiment_id, trial_id=trial.id)
        print_json(shown, sys.stdout)
        return 0
    print(f"Experiment {trial.experiment_id}")
    _describe_trial(store, trial)
    return 0


def _describe_trial(store: ExperimentStore, trial: TrialRecord) -> None:
    search = "" if trial.search_state is None else f" ({trial.search_state} in the search)"
    print(
        f"\nTrial {trial.id}: {trial.state}{search}, {batches_of(trial.batches_trained, trial.max_batches)}, "
        f"seed {trial.seed}"
    )
    print(f"  hyperparameters: {format_metrics(trial.hparams) or '-'}")
    print(f"  checkpoints in:  {trial.checkpoint_dir}")
    print(f"  log:             {store.log_location(LogOwner.trial(trial.id))}")
    print(f"  tensorboard:     {trial.tensorboard_dir}")
    runs = store.trial_runs(trial.id)
    if len(runs) > 1 or any(run.error for run in runs):
        print("  runs:")
        for number, run in enumerate(runs, 1):
            cause = "" if run.error is None else f"  {run_cause(run.state, run.error)}"
            print(f"    {number}. {format_time(run.started_at)}  {run.state}{cause}")
    restarts = store.restarts(trial.id)
    if restarts:
        print(f"  restarts:        {len(restarts)} (max_restarts {trial_max_restarts(store, trial)})")
        for restart in restarts:
            print(f"    {restart.number}. {format_time(restart.restarted_at)}  {restart.cause}")
    validations = store.metrics(trial.id, MetricKind.VALIDATION)
    if validations:
        names = sorted({name for v in validations for name in v.metrics})
        if all(v.metrics.get("batches") == v.batches for v in validations):
            # DeterminedCallback reports the batches as a metric too: a second BATCHES
            # column, the same as the first, would leave the reader wondering which is which.
            names = [name for name in names if name != "batches"]
        print("\nValidations:")
        print_table(
            ["BATCHES", *[name.upper() for name in names]],
            [[v.batches, *[v.metrics.get(name) for name in names]] for v in validations],
        )


def run_cause(state: State, error: dict[str, Any]) -> str:
    """A run's error in one line: the rank it came from, and what it was.

    A run that its launcher's death interrupted often records what its processes hit
    next (a print into the launcher's closed pipe): that is a consequence, and said so.
    """
    where = "" if error.get("rank") is None else f"rank {error['rank']}: "
    what = f"{error['type']}: {error.get('message')}" if error.get("type") else str(error.get("message"))
    if state == State.INTERRUPTED and error.get("consequence"):
        return f"its launcher was gone (then {where}{what})"
    return where + what


def trial_max_restarts(store: ExperimentStore, trial: TrialRecord) -> Any:
    """The ``max_restarts`` of the trial's experiment ("-" for a store older than the key)."""
    return store.experiment(trial.experiment_id).config.get("max_restarts", "-")


def plot(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Draws learning curves to an image file."""
    from det_estimator.cli._plot import plot_learning_curves

    output = Path(args.output)
    if output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"-o {args.output}: name a .png, .svg or .pdf file.")
    store.experiment(args.experiment_id)  # an unknown id is a usage error before any drawing
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output.parent.resolve(), prefix=".det-estimator-probe-"):
            pass
    except OSError as error:
        raise UsageError(
            f"-o {args.output}: cannot write into {output.parent.resolve()}: {error.strerror or error}. "
            "Name a file in a directory this user can create or write."
        ) from None
    try:
        panels = plot_learning_curves(store, args.experiment_id, output)
    except OSError as error:
        raise UsageError(f"-o {args.output}: cannot write it: {error.strerror or error}.") from None
    if args.json:
        print_json({"id": args.experiment_id, "output": str(output.resolve()), "panels": panels}, sys.stdout)
    elif not panels:
        print(f"Experiment {args.experiment_id} has no metrics yet: wrote an empty plot to {output}")
    else:
        curves = "a learning curve" if len(panels) == 1 else f"{len(panels)} learning curves"
        print(f"Wrote {curves} ({', '.join(panels)}) to {output}")
    return 0


def trial_logs(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Everything a trial's processes printed."""
    trial = store.trial(args.trial_id)
    owner = LogOwner.trial(trial.id)
    if store.trial_runs(trial.id) and not store.has_log(owner):
        # Only a launched run writes the log (opened before its processes start); a run in
        # its caller's process printed there, and nothing more will come.
        print(
            f"Trial {trial.id} has no log ({store.log_location(owner)}): its runs were not launched by det-estimator "
            "(run_trial on one slot, det.init(local=True) and a script calling det.core.init() run by hand "
            "print their output where they run; experiment create and resume keep it), or the file was moved "
            "or deleted.",
            file=sys.stderr,
        )
        return 1
    return print_log(store, owner)


def check_context_dir(config: str, context_dir: str, command: str) -> Path:
    """CONTEXT_DIR, resolved; refused when it is not a directory, saying so when it was given before CONFIG."""
    resolved = Path(context_dir).resolve()
    if resolved.is_dir():
        return resolved
    swapped = ""
    if Path(config).is_dir() and resolved.is_file():
        swapped = (
            f" It looks like CONFIG, and {config} like CONTEXT_DIR: the config comes first "
            f"({command} CONFIG CONTEXT_DIR)."
        )
    raise UsageError(f"CONTEXT_DIR {context_dir} is not a directory.{swapped}")


def check_config_file(config: str, context_dir: Path) -> None:
    """Refuses a CONFIG that is not a file, naming the one in CONTEXT_DIR when that is the one meant.

    A config beside its code is named from the current directory, not from CONTEXT_DIR
    (`experiment create const.yaml examples/ctr_binary` from the repository's root).
    """
    if Path(config).is_file():
        return
    beside = context_dir / config
    hint = ""
    if not Path(config).is_absolute() and beside.is_file():
        hint = (
            f" CONFIG is named from the current directory ({Path.cwd()}), not from CONTEXT_DIR: "
            f"did you mean {os.path.relpath(beside)}?"
        )
    raise UsageError(f"CONFIG {config} is not a file.{hint}")


# What one process of a trial needs at the least: TensorFlow alone takes a few hundred MB.
# A count of processes whose least exceeds the machine's memory cannot run.
_MEMORY_PER_PROCESS = 512 * 2**20


def check_slots_fit_this_machine(
    slots: int, config_key: str, hosts_option: bool = True, asked: Optional[str] = None
) -> None:
    """Refuses more processes than this machine's memory can hold; warns of more than it has CPUs.

    More processes than CPUs start and run, more slowly: that is how distributed code is
    tried on a laptop. More than the memory holds (about 0.5 GB each, TensorFlow's own)
    cannot run at all.

    Args:
        slots: the processes asked for, on this machine alone.
        config_key: the config key that also sets them, for the message.
        hosts_option: whether the command has ``--hosts``, to offer it in the message.
        asked: how the command asked for them, for the message (default: ``N slots asked for``).
    """
    asked = asked or f"{slots} slots asked for"
    spread = ", or --hosts to spread the processes over several machines" if hosts_option else ""
    memory = _memory_bytes()
    if memory is not None and slots * _MEMORY_PER_PROCESS > memory:
        most = max(1, memory // _MEMORY_PER_PROCESS)
        raise UsageError(
            f"{asked}, but this machine's {memory / 2**30:.0f} GB of memory holds at most {most} "
            f"processes of a trial (each slot is a process of its own, and TensorFlow alone takes about 0.5 GB in "
            f"each). Give it {most} or fewer (--slots or {config_key}){spread}."
        )
    cpus = _cpus()
    if slots > cpus:
        print(
            f"det-estimator: warning: {slots} slots on {cpus} CPUs: each slot is a process of its own, and they "
            "will share the CPUs, so each trains more slowly.",
            file=sys.stderr,
            flush=True,
        )


def _memory_bytes() -> Optional[int]:
    """This machine's memory, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _check_checkpoint_storage(root: Path, config_path: str) -> None:
    """Refuses a checkpoint_storage.host_path that cannot be created or written, before anything is recorded."""
    from det_estimator.checkpoint import CheckpointStorageError, check_checkpoint_storage

    try:
        check_checkpoint_storage(root)
    except CheckpointStorageError as error:
        raise UsageError(f"{config_path}: {error}") from None


def _tell(json_output: bool, message: str, stream: Optional[Any] = None) -> None:
    """Progress for people: on stderr when stdout carries JSON."""
    print(message, file=stream or (sys.stderr if json_output else sys.stdout), flush=True)
