"""``det-estimator env``: the installed stack, for bug reports."""

import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path

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
