"""Command-line arguments shared by the launchers, and where their processes run."""

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator import _info
from det_estimator.launcher import (
    HostSlots,
    holds_store_password,
    parse_hosts,
    resolve_slots,
    without_store_password,
)


def parse(prog: str, description: str, argv: Optional[list[str]]) -> tuple[argparse.Namespace, list[str]]:
    """The launcher's options and the command after ``--``.

    Raises:
        SystemExit: no command was given (argparse prints the usage).
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--slots", type=int, default=None, help="processes to start on this machine")
    parser.add_argument("--hosts", type=_hosts, default=None, help="host:slots entries separated by commas")
    parser.add_argument("--port", type=int, default=None, help="first port of the workers on other hosts")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run on every slot")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("give the command to run after --, e.g. -- python3 train.py")
    return args, command


def _hosts(text: str) -> list[HostSlots]:
    """``--hosts`` as entries; a host without ``:slots`` has one."""
    try:
        return parse_hosts(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def placement(args: argparse.Namespace) -> list[HostSlots]:
    """Where the processes run: ``--hosts`` / ``--slots``, else the experiment's cluster info, else one here."""
    info = _info.get_cluster_info()
    return resolve_slots(
        args.slots,
        args.hosts,
        info.slots if info is not None else None,
        info.container_addrs if info is not None else (),
    )


def chief_settings(entries: list[HostSlots]) -> dict[str, str]:
    """``DET_CHIEF_IP`` and ``DET_CHIEF_PORT`` for det-estimator's object collectives (kept when already set)."""
    from det_estimator.launcher import chief_address, free_port

    hosts = None if all(entry.is_local for entry in entries) else entries
    return {
        environment_variables.CHIEF_IP: os.environ.get(environment_variables.CHIEF_IP) or chief_address(hosts),
        environment_variables.CHIEF_PORT: os.environ.get(environment_variables.CHIEF_PORT) or str(free_port()),
    }


@contextlib.contextmanager
def processes_environment() -> Iterator[dict[str, str]]:
    """The environment the launcher's processes inherit: its own, but for a PostgreSQL password in it.

    horovodrun, and the launcher's ssh to another host, write the environment on command
    lines that ``ps`` shows, so the password goes into a file instead, in a hidden folder
    of the working directory (which the processes of every host run in), removed when the
    job ends. Under an experiment the run's launcher has done so already.
    """
    if not holds_store_password(os.environ):
        yield dict(os.environ)
        return
    with tempfile.TemporaryDirectory(prefix=".det-estimator-launch-", dir=os.getcwd()) as folder:
        yield without_store_password(os.environ, Path(folder))
