"""The det-estimator command run in this process, and a store recorded for it to read.

Shared by the command's in-process tests (tests/cli/), which see any exception the
command lets through as a failure of their own.
"""

import contextlib
import io
from pathlib import Path

import bad_inputs

from det_estimator import orchestration
from det_estimator.cli import main
from det_estimator.config import load_experiment_config
from det_estimator.store import ExperimentStore


def run_command(argv: list[str]) -> tuple[int, str]:
    """Runs the command in this process; returns its exit status and everything it printed."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse's way of refusing a command line
            status = exit_.code if isinstance(exit_.code, int) else 2
    return status, output.getvalue()


def record_one_experiment(directory: Path) -> Path:
    """A store in ``directory`` holding experiment 1 (ACTIVE, run by this process) and its trial 1, not started.

    ``directory`` also gets the analytic trial and ``ok.yaml`` (see ``bad_inputs``).
    """
    bad_inputs.BadInput("", (), "").set_up(directory)
    path = directory / "store.sqlite"
    with ExperimentStore(path) as store:
        orchestration.record_experiment(store, load_experiment_config(bad_inputs.OK_CONFIG), str(directory))
    return path
