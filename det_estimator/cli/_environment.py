"""``det-estimator env``: the installed stack, for bug reports."""

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Optional

from det_estimator import _stack
from det_estimator._stack import ESTIMATOR, StackReport
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


def stack_rows(report: StackReport) -> dict[str, str]:
    """The lines of ``env`` that name the stack and what runs on it."""
    if report.name == ESTIMATOR:
        stack = "estimator (TensorFlow 2.15 with tf.estimator)"
    else:
        stack = "current (TensorFlow 2.16 or later, no tf.estimator)"
    if report.estimator:
        estimator = "yes: EstimatorTrial, det.init() and det.experimental.estimator run"
    else:
        estimator = (
            "no: EstimatorTrial needs the estimator stack (Python 3.9 to 3.11, pip install 'det-estimator[estimator]')"
        )
    if report.horovod:
        horovod = "yes: several slots run under horovodrun"
    else:
        horovod = "no: several slots need the TensorFlow launcher (MultiWorkerMirroredStrategy)"
    return {
        "stack": stack,
        "keras": report.keras or "not installed",
        "tf.estimator": estimator,
        "horovod support": horovod,
    }


def show_environment() -> int:
    """Prints the stack, the versions det-estimator depends on and what Horovod was built with."""
    report = _stack.report(legacy_keras=_stack.legacy_keras_requested(os.environ))
    rows = {
        "det-estimator": __version__,
        "python": platform.python_version(),
        "tensorflow": report.tensorflow or "not installed",
        **stack_rows(report),
        "tensorflow-estimator": _installed_version("tensorflow-estimator"),
        "horovod": _installed_version("horovod"),
    }
    if report.horovod:
        rows["horovod built with"] = _horovod_build()
    rows["numpy"] = _installed_version("numpy")
    width = max(len(name) for name in rows)
    for name, value in rows.items():
        print(f"{name:<{width}}  {value}")
    return 0
