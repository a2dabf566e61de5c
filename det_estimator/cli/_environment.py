"""``det-estimator env``: the installed stack, for bug reports."""

import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Optional

from det_estimator._version import __version__


def _installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# Each framework's Horovod extension, relative to the horovod package. Horovod 0.28's
# --check-build lists PyTorch as built whenever ``horovod.torch`` imports, which it does
# (with a warning) when the extension was never built: the file decides instead.
_FRAMEWORK_EXTENSIONS = {
    "TensorFlow": ("tensorflow", "mpi_lib"),
    "PyTorch": ("torch", "mpi_lib_v2"),
    "MXNet": ("mxnet", "mpi_lib"),
}


def _horovod_build() -> str:
    """What ``horovodrun --check-build`` reports, in one line, without importing TensorFlow here."""
    launcher = Path(sys.executable).with_name("horovodrun")
    if not launcher.exists():
        return "horovodrun not found next to this Python"
    report = subprocess.run([str(launcher), "--check-build"], capture_output=True, text=True).stdout
    return summarize_check_build(report, _horovod_directory())


def _horovod_directory() -> Optional[Path]:
    spec = importlib.util.find_spec("horovod")  # finds the package without importing it
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def summarize_check_build(report: str, horovod_directory: Optional[Path]) -> str:
    """The frameworks and controllers ``horovodrun --check-build`` marks, in one line.

    A framework is kept only if its extension is in ``horovod_directory`` (when it is known).
    """
    sections: dict[str, list[str]] = {}
    section = ""
    for line in report.splitlines():
        if line.startswith("Available "):
            section = line[len("Available ") :].rstrip(":").lower()
        elif "[X]" in line and section in ("frameworks", "controllers"):
            name = line.split("]", 1)[1].split()[0]
            if section == "frameworks" and not _extension_built(horovod_directory, name):
                continue
            sections.setdefault(section, []).append(name)
    return "; ".join(f"{name}: {', '.join(items)}" for name, items in sections.items()) or "nothing"


def _extension_built(horovod_directory: Optional[Path], framework: str) -> bool:
    if horovod_directory is None or framework not in _FRAMEWORK_EXTENSIONS:
        return True
    subpackage, library = _FRAMEWORK_EXTENSIONS[framework]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return (horovod_directory / subpackage / f"{library}{suffix}").is_file()


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
