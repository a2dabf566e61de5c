"""The ``det-estimator`` command."""

import argparse
import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path
from typing import Optional

from det_estimator import __version__


def _installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _horovod_build() -> str:
    """What ``horovodrun --check-build`` reports, in one line, without importing TensorFlow here."""
    launcher = Path(sys.executable).with_name("horovodrun")
    if not launcher.exists():
        return "horovodrun not found next to this Python"
    report = subprocess.run([str(launcher), "--check-build"], capture_output=True, text=True).stdout
    sections = {}
    section = ""
    for line in report.splitlines():
        if line.startswith("Available "):
            section = line[len("Available ") :].rstrip(":").lower()
        elif "[X]" in line and section in ("frameworks", "controllers"):
            sections.setdefault(section, []).append(line.split("]", 1)[1].split()[0])
    return "; ".join(f"{name}: {', '.join(items)}" for name, items in sections.items()) or "nothing"


def show_environment() -> int:
    """Prints the versions det-estimator depends on and what Horovod was built with."""
    rows = {
        "det-estimator": __version__,
        "python": platform.python_version(),
        "tensorflow": _installed_version("tensorflow-cpu")
        if _installed_version("tensorflow") == "not installed"
        else _installed_version("tensorflow"),
        "tensorflow-estimator": _installed_version("tensorflow-estimator"),
        "horovod": _installed_version("horovod"),
        "horovod built with": _horovod_build(),
        "numpy": _installed_version("numpy"),
    }
    width = max(len(name) for name in rows)
    for name, value in rows.items():
        print(f"{name:<{width}}  {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line's grammar."""
    parser = argparse.ArgumentParser(
        prog="det-estimator",
        description="Train, evaluate and serve tf.estimator models on one to many Horovod workers.",
    )
    parser.add_argument("--version", action="version", version=f"det-estimator {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("env", help="show the installed stack and what Horovod was built with")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the command line; returns the exit status (2 for a bad command line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "env":
        return show_environment()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
