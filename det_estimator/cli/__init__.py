"""The ``det-estimator`` command: run and track experiments on one or many processes."""

import argparse
import contextlib
import functools
import math
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO

from det_estimator import _environment_variables as environment_variables
from det_estimator._host_list import HostSlots, parse_hosts
from det_estimator._version import __version__
from det_estimator.cli import _checkpoints as checkpoints
from det_estimator.cli import _experiments as experiments
from det_estimator.cli import _jobs as jobs
from det_estimator.cli import _stores as stores
from det_estimator.cli._environment import show_environment
from det_estimator.cli._experiments import UsageError
from det_estimator.config import ConfigNoteWarning

if TYPE_CHECKING:
    from det_estimator.store import ExperimentStore, StoreLocation


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


# The largest id SQLite's INTEGER holds: a larger one cannot be looked up at all.
_MAX_ID = 2**63 - 1


def _id(text: str) -> int:
    """An experiment, trial or job id: what the store numbers them with."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= _MAX_ID:
        raise argparse.ArgumentTypeError(f"must be an id, an integer from 1 to 2**63 - 1, not {text!r}")
    return value


def _uuid(text: str) -> str:
    """A checkpoint's uuid, or its first characters."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must be a checkpoint's uuid, or its first characters, not {text!r}")
    return text.strip()


def _output_dir(text: str) -> str:
    """``--output-dir``: a path; an empty one would mean the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a directory, not {text!r}")
    return text


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**31 - 1, not {text!r}")
    return value


def _seconds(text: str) -> float:
    """A time to wait: a number of seconds, 0 or more (``inf`` waits for as long as it takes)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:  # NaN too: it would end the wait at once
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, not {text!r}")
    return value


def _store(text: str) -> str:
    """``--store``: a path; an empty one would silently mean the default store."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"must name the store's database file, not {text!r} (leave --store out for the default store)"
        )
    return text


def _hosts(text: str) -> list[HostSlots]:
    """``--hosts``: ``host:slots`` entries separated by commas, each with its slots."""
    try:
        return parse_hosts(text, require_slots=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    """The command line's grammar."""
    parser = argparse.ArgumentParser(
        prog="det-estimator",
        description="Train, evaluate, tune and serve tf.estimator and Keras models on one to many Horovod workers.",
    )
    parser.add_argument("--version", action="version", version=f"det-estimator {__version__}")
    store_help = (
        f"the experiment store's database file (default: ${environment_variables.STORE}, else "
        "$XDG_DATA_HOME/det-estimator/store.sqlite)"
    )
    parser.add_argument("--store", metavar="PATH", type=_store, help=store_help)
    # Also taken after the command (`experiment list --store PATH`), where a user puts it as
    # often as before; SUPPRESS keeps a --store given before the command when none comes after.
    store_option = argparse.ArgumentParser(add_help=False)
    store_option.add_argument("--store", metavar="PATH", type=_store, default=argparse.SUPPRESS, help=store_help)
    json_option = argparse.ArgumentParser(add_help=False, parents=[store_option])
    json_option.add_argument("--json", action="store_true", help="print JSON for scripts")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("env", help="show the installed stack and what Horovod was built with")

    experiment = commands.add_parser("experiment", aliases=["e"], help="create, watch, pause and resume experiments")
    actions = experiment.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", parents=[json_option], help="run an experiment from a config")
    create.add_argument("config", metavar="CONFIG", help="the experiment config (YAML)")
    create.add_argument("context_dir", metavar="CONTEXT_DIR", help="the directory holding the entrypoint's code")
    create.add_argument(
        "--slots",
        type=_positive_int,
        help="slots on this machine: the trial's processes for a single-trial experiment (default: "
        "resources.slots_per_trial); for a search, the slots its trials share, each taking "
        "resources.slots_per_trial (default: one trial's)",
    )
    create.add_argument(
        "--hosts",
        metavar="HOST:SLOTS,...",
        type=_hosts,
        help="run the processes on these machines, e.g. host1:2,host2:2 (default: this one); "
        "the code, the store and checkpoint_storage must be on a file system they share",
    )
    create.add_argument("--test", action="store_true", help="one batch, one validation step and one checkpoint")
    create.add_argument("--seed", type=_seed, help="the experiment seed (default: reproducibility.experiment_seed)")
    create.add_argument(
        "--verbose", "-v", action="store_true", help="show all of the trial's output, not just progress"
    )
    create.set_defaults(run=experiments.create)
    for name, run, help_text in (
        ("describe", experiments.describe, "config, hyperparameters, state and every validation"),
        ("pause", experiments.pause, "checkpoint and stop a running experiment"),
        (
            "resume",
            experiments.resume,
            "continue a paused, interrupted or failed experiment from its latest checkpoint",
        ),
    ):
        action = actions.add_parser(name, parents=[json_option], help=help_text)
        action.add_argument("experiment_id", metavar="ID", type=_id)
        action.set_defaults(run=run)
        if name == "pause":
            action.add_argument("--timeout", type=_seconds, default=600.0, help="seconds to wait for the checkpoint")
        if name == "resume":
            action.add_argument("--verbose", "-v", action="store_true", help="show all of the trial's output")
    plot = actions.add_parser("plot", parents=[json_option], help="draw learning curves to an image file")
    plot.add_argument("experiment_id", metavar="ID", type=_id)
    plot.add_argument("-o", "--output", metavar="FILE", required=True, help="a .png, .svg or .pdf file")
    plot.set_defaults(run=experiments.plot)
    actions.add_parser("list", parents=[json_option], help="every experiment").set_defaults(
        run=experiments.list_experiments
    )

    checkpoint = commands.add_parser("checkpoint", aliases=["c"], help="an experiment's checkpoints")
    # One checkpoint, named by its uuid: what `describe` and `download` take.
    checkpoint_uuid = argparse.ArgumentParser(add_help=False, parents=[json_option])
    checkpoint_uuid.add_argument(
        "uuid",
        metavar="UUID",
        type=_uuid,
        help="the checkpoint's uuid, or enough of its start (4 characters or more) to tell it apart",
    )
    checkpoint_actions = checkpoint.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = checkpoint_actions.add_parser(
        "list", parents=[json_option], help="uuid, trial, batches, state, kept as best or latest, metrics, size, path"
    )
    listing.add_argument("experiment_id", metavar="ID", type=_id)
    listing.add_argument("--all", action="store_true", help="also those retention deleted")
    listing.set_defaults(run=checkpoints.list_checkpoints)
    described_checkpoint = checkpoint_actions.add_parser(
        "describe",
        parents=[checkpoint_uuid],
        help="experiment, trial, state, kept as, metrics, size, path, files, trial type, the call that loads it",
    )
    described_checkpoint.set_defaults(run=checkpoints.describe_checkpoint)
    download = checkpoint_actions.add_parser(
        "download", parents=[checkpoint_uuid], help="copy its files into a new directory, checked against its checksums"
    )
    download.add_argument(
        "-o",
        "--output-dir",
        metavar="DIR",
        type=_output_dir,
        help="where the copy goes: a directory that does not exist yet, or an empty one (default: checkpoints/UUID)",
    )
    download.set_defaults(run=checkpoints.download_checkpoint)

    trial = commands.add_parser("trial", aliases=["t"], help="an experiment's trials and their output")
    trial_actions = trial.add_subparsers(dest="action", metavar="ACTION", required=True)
    logs = trial_actions.add_parser("logs", parents=[store_option], help="everything the trial printed")
    logs.add_argument("trial_id", metavar="ID", type=_id)
    logs.set_defaults(run=experiments.trial_logs, json=False)
    trials = trial_actions.add_parser("list", parents=[json_option], help="an experiment's trials, best first")
    trials.add_argument("experiment_id", metavar="EXPERIMENT_ID", type=_id)
    trials.set_defaults(run=experiments.list_trials)
    described = trial_actions.add_parser("describe", parents=[json_option], help="a trial's runs and validations")
    described.add_argument("trial_id", metavar="ID", type=_id)
    described.set_defaults(run=experiments.describe_trial)

    job = commands.add_parser("job", aliases=["j"], help="batch-inference jobs: a script on N slots, with its log")
    job_actions = job.add_subparsers(dest="action", metavar="ACTION", required=True)
    job_run = job_actions.add_parser("run", parents=[json_option], help="run a job config's script in the foreground")
    job_run.add_argument("config", metavar="CONFIG", help="the job config (YAML): entrypoint_script, data, resources")
    job_run.add_argument("context_dir", metavar="CONTEXT_DIR", help="the directory holding the script")
    job_run.add_argument("--slots", type=_positive_int, help="processes to run (default: resources.slots, else 1)")
    job_run.add_argument("--verbose", "-v", action="store_true", help="show the job's output as it comes")
    job_run.set_defaults(run=jobs.run)
    job_actions.add_parser("list", parents=[json_option], help="every job").set_defaults(run=jobs.list_jobs)
    job_log = job_actions.add_parser("logs", parents=[store_option], help="everything the job printed")
    job_log.add_argument("job_id", metavar="ID", type=_id)
    job_log.set_defaults(run=jobs.job_logs, json=False)
    store = commands.add_parser(
        "store",
        aliases=["s"],
        help="the store itself: its id, making a copy its own, copying it into another, upgrading its schema",
    )
    store_actions = store.add_subparsers(dest="action", metavar="ACTION", required=True)
    store_actions.add_parser(
        "describe", parents=[json_option], help="the store's file, id, schema version and whether it is a copy"
    ).set_defaults(run=stores.describe)
    store_actions.add_parser(
        "detach",
        parents=[json_option],
        help="make a copy of a store one of its own: a new id, and its own copies of its checkpoints and logs",
    ).set_defaults(run=stores.detach)
    store_actions.add_parser(
        "upgrade",
        parents=[json_option],
        help="upgrade a store of an older schema to this det-estimator's (which refuses it until then)",
        description="Upgrades the store, made by an older det-estimator, to this release's schema, in one "
        "transaction. Run it while nothing runs on the store; older releases cannot open it afterwards. A store "
        "at this release's schema is left as it is.",
    ).set_defaults(run=stores.upgrade)
    copy = store_actions.add_parser(
        "copy",
        help="copy every experiment, trial, metric, checkpoint record, job and log into another store, new or empty",
        description="Copies every record of the store SRC into the store DST (SQLite or PostgreSQL, new or empty), "
        "with their ids, and the trials' and jobs' logs into DST's files folder. The experiments' checkpoint "
        "folders move to DST: SRC no longer writes or deletes there.",
    )
    copy.add_argument("source", metavar="SRC", type=_store, help="the store copied: a path, or a postgresql:// URL")
    copy.add_argument(
        "destination",
        metavar="DST",
        type=_store,
        help="the store it is copied into: a path where there is no store yet (or an empty store), or an empty "
        "PostgreSQL database's URL",
    )
    copy.add_argument("--json", action="store_true", help="print JSON for scripts")
    copy.set_defaults(run=stores.copy)
    ui = commands.add_parser(
        "ui", parents=[store_option], help="serve a web page over the store: experiments, curves, searches, trials"
    )
    ui.add_argument("--port", type=_port, default=8080, help="the port to listen on (default: 8080)")
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1, this machine only; any other address needs a token)",
    )
    ui.add_argument(
        "--token",
        type=_token,
        help="the token every request must carry on a non-loopback address (default: "
        f"${environment_variables.UI_TOKEN}, else a new one, printed once)",
    )
    ui.add_argument(
        "--refresh", type=_seconds, default=3.0, help="seconds between the pages' refreshes of their data (default: 3)"
    )
    return parser


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port, an integer from 1 to 65535, not {text!r}")
    return value


def _token(text: str) -> str:
    if len(text) < 16:
        raise argparse.ArgumentTypeError("must be at least 16 characters long (anyone may try short ones)")
    return text


def _serve_ui(args: argparse.Namespace) -> int:
    """``det-estimator ui``: the web page, over the store whether it exists yet or not (its pages say which)."""
    from det_estimator.store import StoreUnusableError
    from det_estimator.ui import serve

    try:
        location = _named_store(args)
    except StoreUnusableError as error:
        print(f"det-estimator: error: {error}", file=sys.stderr)
        return 2
    try:
        return serve(location, host=args.host, port=args.port, token=args.token, refresh_seconds=args.refresh)
    except KeyboardInterrupt:
        return 0


def _named_store(args: argparse.Namespace) -> "StoreLocation":
    """The store ``--store`` names, else ``DET_ESTIMATOR_STORE``, else the default SQLite file.

    Raises:
        StoreUnusableError: a URL that names no store (see ``parse_store_location``).
    """
    from det_estimator.store import StoreLocation, default_store_path, parse_store_location

    given = args.store or os.environ.get(environment_variables.STORE)
    if not given:
        return StoreLocation(path=default_store_path().resolve())
    return parse_store_location(given, "--store" if args.store else environment_variables.STORE)


# Commands that may make a new store; every other one reads an existing store.
_CREATING_COMMANDS = {("experiment", "create"), ("e", "create"), ("job", "run"), ("j", "run")}
# Commands that write to the store, which must then be writable.
_DETACHING_COMMANDS = {("store", "detach"), ("s", "detach")}
# Commands whose own output says whether the store is a copy of another.
_DESCRIBING_COMMANDS = {("store", "describe"), ("s", "describe")}
# The command that upgrades a store of an older schema, which every other command refuses.
_UPGRADING_COMMANDS = {("store", "upgrade"), ("s", "upgrade")}
_WRITING_COMMANDS = (
    _CREATING_COMMANDS
    | _DETACHING_COMMANDS
    | {(name, action) for name in ("experiment", "e") for action in ("pause", "resume")}
)

# Commands that name their stores themselves (SRC and DST), not by --store.
_COPYING_COMMANDS = {("store", "copy"), ("s", "copy")}

# Commands that list everything in the store, and need no id.
_LISTING_EVERYTHING = {("experiment", "list"), ("e", "list"), ("job", "list"), ("j", "list")}


def _store_to_open(args: argparse.Namespace) -> Optional["StoreLocation"]:
    """The store a command uses; None when there is none and the command has nothing to show.

    Only commands that create experiments or jobs make a new store: reading commands
    refuse a path where there is no store rather than create an empty one there (and
    a database without a store, see :func:`_open_store`).
    """
    from det_estimator.store import default_store_path

    given = args.store or os.environ.get(environment_variables.STORE)
    named_by = "--store" if args.store else environment_variables.STORE
    location = _named_store(args)
    if location.path is None:
        return location
    path = Path(given).expanduser() if given else default_store_path()
    if (args.command, getattr(args, "action", None)) in _CREATING_COMMANDS:
        if given:
            _check_store_folder(path, named_by)
        return location
    if path.is_file() and path.stat().st_size == 0:
        # SQLite would take an empty file for an empty database, and opening it makes a store there.
        raise UsageError(
            f"The store {path} is an empty file, not a store det-estimator made. Give the --store (or "
            f"{environment_variables.STORE}) of an existing store; `det-estimator experiment create` makes one."
        )
    if path.exists():
        return location
    # Listing every experiment or job of the default store, before the first: an empty
    # list. `trial list ID` and `checkpoint list ID` name an experiment, which cannot be there.
    if (args.command, args.action) in _LISTING_EVERYTHING and not given:
        if args.json:
            print("[]")
        else:
            what = "jobs" if args.command in ("job", "j") else "experiments"
            print(f"No {what} yet: there is no store at {path}.")
        return None
    raise UsageError(
        f"There is no experiment store at {path}. Give the --store (or {environment_variables.STORE}) of an existing "
        "store; `det-estimator experiment create` makes one."
    )


def _copy_locations(args: argparse.Namespace) -> tuple["StoreLocation", "StoreLocation"]:
    """``store copy``'s SRC, an existing store, and DST, where a store may be made (checked as ``--store`` is)."""
    from det_estimator.store import parse_store_location

    if args.store:
        raise UsageError(
            f"--store {args.store}: `store copy` names its two stores as SRC and DST, and uses no other; leave "
            "--store out."
        )
    source = parse_store_location(args.source, "SRC")
    destination = parse_store_location(args.destination, "DST")
    if source.path is not None and not (source.path.is_file() and source.path.stat().st_size > 0):
        raise UsageError(
            f"SRC {source.path}: there is no experiment store there. Expected the path of an existing store, or "
            "the URL of a PostgreSQL database holding one."
        )
    if destination.path is not None:
        _check_store_folder(destination.path, "DST")
    return source, destination


def _check_store_folder(path: Path, named_by: str) -> None:
    """Refuses a new store a user named in a folder that is missing or cannot be written.

    Only the default store's folder is made: a store named in a folder that does not exist
    is likelier a typo than a wish for new folders, which would hold an empty store.
    """
    if path.exists():
        return
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{named_by} {path}: {folder} is not a folder, so no store can be made in it.")
    if not folder.is_dir():
        raise UsageError(
            f"{named_by} {path}: there is no folder {folder} to make the store in. Give a store in an existing "
            f"folder, or make the folder first (mkdir -p {shlex.quote(str(folder))})."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"{named_by} {path}: the folder {folder} cannot be written by this user, so no store can be made in it. "
            "Give a store in a folder you can write."
        )


def _open_store(
    location: "StoreLocation",
    writing: bool,
    detaching: bool = False,
    create: bool = True,
    upgrade: bool = False,
    says_copy: bool = False,
) -> "ExperimentStore":
    """The store at ``location`` (made there if missing, when ``create``); checked writable for a command that writes.

    A store of an older schema is upgraded when ``upgrade`` (``store upgrade``), else refused.

    A copy of another store is read-only (``store detach`` aside): a command that reads
    it says so once, on stderr (unless it ``says_copy`` itself, as ``store describe``
    does), and one that writes is refused.
    """
    from det_estimator.store import ExperimentStore

    store = ExperimentStore(location, create=create, upgrade=upgrade)
    if writing:
        try:
            store.check_writable(detaching=detaching)
        except BaseException:
            store.close()
            raise
    elif store.copy_of is not None and not says_copy:
        print(
            f"det-estimator: note: the store {store.path} is a copy of {store.copy_of}, and read-only; "
            f"`det-estimator --store {store.home} store detach` makes it a store of its own.",
            file=sys.stderr,
        )
    return store


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the command line; returns the exit status (2 for a bad command line or config)."""
    with warnings.catch_warnings():
        python_show = warnings.showwarning

        def show(
            message: Any,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: Optional[TextIO] = None,
            line: Optional[str] = None,
        ) -> None:
            # What the config says to the user, as the command's other warnings: Python's
            # format would name the det-estimator line that loaded the config instead.
            if issubclass(category, ConfigNoteWarning):
                print(f"det-estimator: warning: {message}", file=file or sys.stderr, flush=True)
            else:
                python_show(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return _main(argv)


def _main(argv: Optional[list[str]]) -> int:
    from det_estimator.errors import DetEstimatorError
    from det_estimator.store import NoStoreError, StoreUnusableError, UnknownIdError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "env":
        return show_environment()
    if args.command == "ui":
        return _serve_ui(args)
    run: Optional[Callable[..., int]] = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        if (args.command, args.action) in _COPYING_COMMANDS:
            return run(*_copy_locations(args), args)
        location = _store_to_open(args)
        if location is None:
            return 0
        if (args.command, args.action) in _CREATING_COMMANDS:
            # The command checks its input first, and opens the store only once it has
            # accepted it: a refused command leaves no new store file or folder behind.
            # An existing store that cannot be used (or a database server that cannot be
            # reached) is refused before anything else.
            if location.path is None or location.path.exists():
                with contextlib.suppress(NoStoreError):
                    _open_store(location, writing=True, create=False).close()
            return run(functools.partial(_open_store, location, writing=True), args)
        command = (args.command, args.action)
        writing = command in _WRITING_COMMANDS
        opened = _open_store(
            location,
            writing,
            command in _DETACHING_COMMANDS,
            create=False,
            upgrade=command in _UPGRADING_COMMANDS,
            says_copy=command in _DESCRIBING_COMMANDS,
        )
        with opened as store:
            return run(store, args)
    except (UsageError, UnknownIdError, StoreUnusableError) as error:
        print(f"det-estimator: error: {error}", file=sys.stderr)
        return 2
    except DetEstimatorError as error:
        print(f"det-estimator: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Outside a run (which turns Ctrl-C into a pause): nothing to save, no traceback to show.
        print("det-estimator: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error of ours. Point stdout at
        # devnull so that Python's exit-time flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
