"""Recovery tests: real experiments with a fault injected (tests/recovery/fault_trial.py).

They reuse the command-line helpers of tests/cli/conftest.py (``Det``, ``Context``): each
call of the command has a timeout, so a hang fails its test instead of stalling the suite.
"""

import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CLI_CONFTEST = HERE.parent / "cli" / "conftest.py"


@pytest.fixture(scope="session")
def cli(module_loader):
    """tests/cli/conftest.py as a module: ``Det``, ``Context``, ``LEARNING_RATE``, ``GLOBAL_BATCH``."""
    import importlib.util
    import sys

    name = "cli_helpers_for_recovery"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CLI_CONFTEST)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def det(cli, tmp_path):
    """The command on a store of the test's own; what a failed test left running is killed."""
    command = cli.Det(tmp_path / "store.sqlite")
    yield command
    for running in command.started:
        running.kill()


@pytest.fixture
def context(cli, tmp_path):
    """A context dir with the analytic trial and the fault trial in it."""
    made = cli.Context(tmp_path / "context")
    shutil.copy(HERE / "fault_trial.py", made.directory / "fault_trial.py")
    return made


def fault_config(context, max_batches: int = 20, fault=None, max_restarts: int = 5, slots: int = 1, **overrides):
    """The analytic config on the fault trial, with ``fault`` injected."""
    hparams = {"fault": fault} if fault else {}
    return context.config(
        max_batches,
        hparams=hparams,
        entrypoint="fault_trial:FaultTrial",
        max_restarts=max_restarts,
        resources={"slots_per_trial": slots},
        **overrides,
    )


def created_id(output: str) -> int:
    """The experiment id in ``Created experiment N`` of the command's output."""
    import re

    match = re.search(r"^Created experiment (\d+)", output, re.MULTILINE)
    assert match, f"no 'Created experiment' line in:\n{output}"
    return int(match.group(1))


def closed_form_weight(analytic, cli, batches: int) -> float:
    """The analytic trial's weight after ``batches`` batches, from its closed form."""
    return analytic.expected_weight(batches, cli.LEARNING_RATE, cli.GLOBAL_BATCH)


@pytest.fixture
def helpers():
    """The helpers of this folder, for its tests (the suite imports test files by path, not as a package)."""
    from types import SimpleNamespace

    return SimpleNamespace(fault_config=fault_config, created_id=created_id, closed_form_weight=closed_form_weight)
