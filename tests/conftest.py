"""Fixtures shared by the whole suite: the analytic trial (tests/support/) and real interrupted runs."""

import contextlib
import importlib.util
import io
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import psutil
import pytest
import yaml

SUPPORT = Path(__file__).parent / "support"
EXAMPLES = Path(__file__).parent.parent / "examples"


# What a test needs that only the estimator stack has: its marker, the module that must import,
# and what to say when it does not. The current stack (TensorFlow 2.16+, no tf.estimator, no
# Horovod) skips such tests with that reason.
_NEEDS = {
    "estimator": ("tensorflow_estimator", "needs tf.estimator: TensorFlow 2.15 and the estimator stack"),
    "horovod": ("horovod", "needs Horovod: the estimator stack (bash scripts/setup.sh)"),
}
# Files and directories (relative to tests/) whose tests all need one of them.
_NEEDS_BY_PATH = {
    "estimator": (
        "cli/test_experiment_commands.py",
        "estimator/",
        "examples/test_ctr_binary.py",
        "examples/test_ctr_native.py",
        "examples/test_digits_dnn.py",
        "native/",
        "recovery/",
        "test_checkpoint_kind.py",
    ),
    # tests/distributed/test_metric_policy.py marks its own: its TensorFlow launcher's runs need neither.
    "horovod": (
        "distributed/test_command_on_two_slots.py",
        "distributed/test_contexts.py",
        "distributed/test_examples_on_two_slots.py",
        "distributed/test_horovod_stack.py",
        "distributed/test_keras_example_on_two_slots.py",
        "distributed/test_keras_reducer_metric.py",
        "distributed/test_keras_trial.py",
        "distributed/test_make_metric.py",
        "distributed/test_trial_controller.py",
        "distributed/test_two_hosts.py",
        "keras_api/test_fit_and_job_on_processes.py",
    ),
}
# Fixtures that build or run the analytic EstimatorTrial.
_ESTIMATOR_FIXTURES = frozenset({"analytic"})
TESTS = Path(__file__).parent


def _missing(marker: str) -> bool:
    return importlib.util.find_spec(_NEEDS[marker][0]) is None


def _needs_of_path(path: Path) -> list:
    relative = path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else ""
    return [marker for marker, paths in _NEEDS_BY_PATH.items() if any(relative.startswith(p) for p in paths)]


class _ModuleOfAnotherStack(pytest.Module):
    """A test file whose tests all need what this stack lacks: skipped whole, before it is imported."""

    def collect(self):
        marker = next(marker for marker in _needs_of_path(self.path) if _missing(marker))
        pytest.skip(_NEEDS[marker][1], allow_module_level=True)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    """A file of _NEEDS_BY_PATH is not imported where what it needs is missing (its imports would fail)."""
    if any(_missing(marker) for marker in _needs_of_path(module_path)):
        return _ModuleOfAnotherStack.from_parent(parent, path=module_path)
    return None


def _mark_needs(items) -> None:
    for item in items:
        for marker in _needs_of_path(item.path):
            item.add_marker(marker)
        if _ESTIMATOR_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("estimator")
    # `make test` runs an any_stack test in the current stack's lane alone, where one that
    # needs the estimator stack skips: it would run nowhere.
    nowhere = [
        item.nodeid
        for item in items
        if item.get_closest_marker("any_stack") and any(item.get_closest_marker(marker) for marker in _NEEDS)
    ]
    if nowhere:
        raise pytest.UsageError(
            "marked any_stack but needing the estimator stack (make test would run them nowhere): " + ", ".join(nowhere)
        )


def pytest_runtest_setup(item):
    """Skips a test marked ``estimator`` or ``horovod`` where that is missing, with the reason."""
    for marker in _NEEDS:
        if item.get_closest_marker(marker) is not None and _missing(marker):
            pytest.skip(_NEEDS[marker][1])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    # First: pytest's `-m` deselects in its own hook of this name, which must see these markers.
    _mark_needs(items)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_last(config, items):
    # Last: after pytest-xdist has written each test's group into its node id.
    _group_by_xdist_group(config, items)


def _group_by_xdist_group(config, items) -> None:
    """``--dist loadgroup``: a test's ``xdist_group`` put in its node id, so that a group runs on one test process.

    pytest-xdist 3.8 writes the group into ``item._nodeid``, which pytest 9 no longer reads
    (a node's id is ``item._id``): without this, a group's tests spread over the test
    processes, and a session-scoped run they share runs once in each. (A parametrized
    grouped test then shows as ``test[param]@group]`` in pytest's short summary.)
    """
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        marks = item.iter_markers("xdist_group")
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")) for mark in marks})
        suffix = "@" + "_".join(groups)
        if groups and hasattr(item, "_id") and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


def load_module(path: Path, name: Optional[str] = None):
    """Imports a file as a module named after it (or ``name``), registered so that later imports find it.

    A conftest's helpers need a ``name``: every conftest's file is named alike.
    """
    name = name or path.stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered under its plain name, as worker processes import it (they put its
    # directory on sys.path).
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def module_loader():
    """:func:`load_module`, for conftests below this one."""
    return load_module


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster for this test process (tests/support/postgres.py), stopped at the end.

    Skips where no server can run here, saying why; under CI (CI=true) that fails instead,
    since the set-up installs one.
    """
    postgres = load_module(SUPPORT / "postgres.py")
    why = postgres.missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the PostgreSQL tests cannot run in CI: {why}", pytrace=False)
        pytest.skip(why)
    server = postgres.start_server()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server, request) -> str:
    """The URL (password included) of a new, empty database on the tests' PostgreSQL server."""
    return postgres_server.new_database(f"test_{os.getpid()}_{next(_database_numbers)}")


_database_numbers = itertools.count(1)


@pytest.fixture(autouse=True)
def own_store(tmp_path, monkeypatch):
    """Every test records its runs in a store of its own (run_trial and det.init use the default store).

    A PostgreSQL store a test makes keeps its files in the test's folder too, not in the user's.
    """
    path = tmp_path / "default-store" / "store.sqlite"
    monkeypatch.setenv("DET_ESTIMATOR_STORE", str(path))
    monkeypatch.setenv("DET_ESTIMATOR_STORE_FILES", str(tmp_path / "store-files"))
    return path


@pytest.fixture
def searcher_operations(monkeypatch):
    """Gives the next in-process runs operations of the lengths given, as a search that promotes a trial does.

    Call it with the lengths; it returns the list of ``(length, searcher metric)`` that
    the chief completes, appended as it completes them.
    """
    from det_estimator.core import _context
    from det_estimator.core._searcher import FixedLengths

    def give(lengths: list) -> list:
        completed = []

        class Recorded(FixedLengths):
            def next_length(self, done):
                if done is not None:
                    completed.append(done)
                return super().next_length(done)

        monkeypatch.setattr(_context, "FixedLengths", lambda _: Recorded(lengths))
        return completed

    return give


@pytest.fixture
def script_main(monkeypatch):
    """``script_main(path, *args)``: a script's ``main()`` run in this process, as ``python path ARGS`` runs it.

    For what a script says about its arguments, which no process boundary changes: the
    script is imported afresh (its ``model_def``, a name several examples use, too) with
    ``sys.argv`` and ``sys.path`` restored afterwards. Returns ``(exit status, stdout,
    stderr)``; an exception other than ``SystemExit`` fails the test, as a traceback would.
    """
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    def run(path: Path, *args) -> tuple:
        monkeypatch.setattr(sys, "argv", [str(path), *map(str, args)])
        monkeypatch.setattr(sys, "path", [str(path.parent), *sys.path])
        shared = sys.modules.pop("model_def", None)
        spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}_main", path)
        script = importlib.util.module_from_spec(spec)
        stdout, stderr = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                spec.loader.exec_module(script)
                script.main()
            status = 0
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        finally:
            sys.modules.pop("model_def", None)
            if shared is not None:
                sys.modules["model_def"] = shared
        return status, stdout.getvalue(), stderr.getvalue()

    return run


@pytest.fixture
def example_config(tmp_path):
    """``example_config(example, name)``: a copy of an example's config in tmp_path, whose
    checkpoints go under tmp_path instead of the example's own runs/ directory."""

    def copy(example: str, name: str = "const.yaml") -> Path:
        text = (EXAMPLES / example / name).read_text()
        path = tmp_path / name
        path.write_text(text.replace("host_path: runs/checkpoints", f"host_path: {tmp_path}"))
        return path

    return copy


@pytest.fixture
def one_rank_of_two(monkeypatch):
    """The next in-process runs play rank 0 of a job of two processes (see tests/support/one_of_two.py)."""
    load_module(SUPPORT / "one_of_two.py").play_one_rank_of_two(monkeypatch)


@pytest.fixture(scope="session")
def analytic():
    """The analytic_trial module (it imports analytic_closed_form, loaded first)."""
    load_module(SUPPORT / "analytic_closed_form.py")
    return load_module(SUPPORT / "analytic_trial.py")


@pytest.fixture
def search_of(tmp_path):
    """``search_of(config, trial_files, slots=None)``: runs a search through the command, to its end.

    The trial files (names under tests/support) and the config go into a code directory
    of their own; the experiment is recorded in a store of its own; ``slots`` is the
    command's ``--slots`` (default: one trial's). Returns what
    ``experiment describe 1 --json`` says of it, once ``experiment create`` exited 0.
    """
    command = str(Path(sys.executable).with_name("det-estimator"))
    store = tmp_path / "search-store.sqlite"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

    def det(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [command, "--store", str(store), *args], capture_output=True, text=True, env=env, timeout=280
        )

    def run(config: dict, trial_files: tuple, slots: Optional[int] = None) -> dict:
        context_dir = tmp_path / "code"
        context_dir.mkdir()
        for name in trial_files:
            shutil.copy(SUPPORT / name, context_dir)
        (context_dir / "search.yaml").write_text(yaml.safe_dump(config))
        slots_option = [] if slots is None else ["--slots", str(slots)]
        created = det("experiment", "create", str(context_dir / "search.yaml"), str(context_dir), *slots_option)
        assert created.returncode == 0, created.stdout + created.stderr
        return json.loads(det("experiment", "describe", "1", "--json").stdout)

    return run


def start_run(
    directory: Path, max_batches: int, slots: int, seconds_per_batch: float = 0.0, **hparams
) -> subprocess.Popen:
    """Starts run_analytic.py in a process group of its own."""
    command = [sys.executable, str(SUPPORT / "run_analytic.py"), str(directory), str(max_batches), str(slots)]
    return subprocess.Popen(
        [*command, str(seconds_per_batch), json.dumps(hparams)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )


def wait_for_line(process: subprocess.Popen, needle: str, timeout: float = 120) -> str:
    """Reads the run's output until a line contains ``needle``; returns the output so far."""
    deadline = time.monotonic() + timeout
    seen = []
    for line in process.stdout:
        seen.append(line)
        if needle in line:
            return "".join(seen)
        if time.monotonic() > deadline:
            break
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"{needle!r} never appeared; output:\n{''.join(seen)[-5000:]}")


def communicate_or_kill(process: subprocess.Popen, timeout: float, what: str) -> str:
    """The process's output once it exits; past ``timeout`` its process group is killed and the test fails."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{what} did not finish within {timeout} s; output:\n{output[-5000:]}")
    return output


def finish(process: subprocess.Popen, timeout: float = 180):
    """Waits for the run; returns (exit status, output, the outcome it printed or None)."""
    output = communicate_or_kill(process, timeout, "the run")
    outcomes = [line for line in output.splitlines() if line.startswith("OUTCOME ")]
    outcome = json.loads(outcomes[-1][len("OUTCOME ") :]) if outcomes else None
    return process.returncode, output, outcome


def kill_at_random_batch(process: subprocess.Popen, seed: int) -> None:
    """SIGKILLs every process of the run at once, at a random moment after its first checkpoint.

    Like a machine that loses power: the launcher, horovodrun and every worker die
    together, wherever each of them is.
    """
    wait_for_line(process, "checkpoint")
    time.sleep(random.Random(seed).uniform(0.0, 0.6))
    launcher = psutil.Process(process.pid)
    for member in [*launcher.children(recursive=True), launcher]:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    process.wait(timeout=30)


@pytest.fixture
def runs():
    """Helpers that start the analytic trial as a separate process, and interrupt it."""
    return SimpleNamespace(
        start=start_run,
        wait_for_line=wait_for_line,
        finish=finish,
        kill_at_random_batch=kill_at_random_batch,
        communicate_or_kill=communicate_or_kill,
    )
