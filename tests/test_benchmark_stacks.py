"""benchmarks/stacks.py: a benchmark's figures from runs on several stacks, in one table."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

STACKS_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "stacks.py"
# This interpreter's venv stands in for a stack's.
THIS_VENV = Path(sys.executable).parent.parent


def load_stacks_module():
    spec = importlib.util.spec_from_file_location("benchmark_stacks", STACKS_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_stacks(*arguments: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(STACKS_SCRIPT), *arguments], capture_output=True, text=True, timeout=timeout
    )


def test_figures_written_by_a_run_are_read_back_as_they_were(tmp_path):
    stacks = load_stacks_module()
    figures = [stacks.Figure("no metric, fastest", 0.25, "s"), stacks.Figure("|AUC - sklearn|", 1e-16, "")]
    stacks.write_figures(str(tmp_path / "figures.json"), figures)
    assert stacks._read_figures(tmp_path / "figures.json") == figures
    stacks.write_figures(None, figures)  # no --figures: nothing written, no error


def test_a_cell_is_the_median_and_the_range_of_the_rounds():
    stacks = load_stacks_module()
    assert stacks._cell([3.0, 1.0, 2.0], "x", failed=False) == "2.000 [1.000, 3.000]"
    assert stacks._cell([410.26], "batches/s", failed=False) == "410.3"
    assert stacks._cell([], "s", failed=True) == "failed"
    assert stacks._cell([], "records/s", failed=False) == "-"


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["keras_reducer_metric", "--stacks", "estimator,nightly"], "--stacks 'estimator,nightly': expected"),
        (["keras_reducer_metric", "--stacks", "current", "--current-venv", "/nonexistent"], "no /nonexistent/bin"),
        (["keras_reducer_metric", "--rounds", "0"], "--rounds 0: expected at least 1"),
        (["reducers"], "invalid choice: 'reducers'"),
    ],
)
def test_bad_arguments_exit_2_saying_what_was_expected(arguments, message):
    result = run_stacks(*arguments)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# Four runs that each import TensorFlow, on a machine that may be busy: a long run, so `slow`.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_benchmark_runs_on_each_stack_and_its_figures_come_side_by_side():
    result = run_stacks(
        "keras_reducer_metric",
        "--stacks",
        "estimator,current",
        "--estimator-venv",
        str(THIS_VENV),
        "--current-venv",
        str(THIS_VENV),
        "--rounds",
        "2",
        "--",
        "--rows",
        "3000",
        "--repeats",
        "1",
        timeout=560,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # Interleaved: the second round starts with the stack the first ended with.
    assert [line.split(" on ")[1] for line in result.stderr.splitlines() if line.startswith("round ")] == [
        "estimator",
        "current",
        "current",
        "estimator",
    ]
    lines = result.stdout.splitlines()
    assert lines[0] == "keras_reducer_metric --rows 3000 --repeats 1: 2 round(s) on each stack, interleaved"
    (row,) = [line for line in lines if line.strip().startswith("ReducerMetric(RocAuc()): |AUC - sklearn|")]
    # Two columns, each a median and a range over the 2 rounds.
    assert row.count("[") == 2
