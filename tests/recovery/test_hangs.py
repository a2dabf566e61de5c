"""The hang watch on real processes: two ranks under horovodrun, one of them stuck, end as a hung trial.

Each case: the trial ends as ERROR with the hang cause, the log holds both ranks' Python
stacks, the cause names where each rank is stuck, and no process of the trial is left
(looked up in the process table by the folder the trial's processes run in).
"""

import os
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.estimator, pytest.mark.horovod]

HERE = Path(__file__).parent
# Short, so that the tests are: the default is half an hour.
HANG_TIMEOUT_SECONDS = 5


def processes_in(directory: Path) -> list[int]:
    """The processes whose working directory is ``directory`` (a trial's processes run in its context dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(os.readlink(f"/proc/{entry}/cwd")) == directory.resolve():
                    found.append(int(entry))
            except OSError:
                continue  # gone meanwhile, or not ours
    return found


def line_of(path: Path, marker: str) -> int:
    """The number of the line of ``path`` that holds ``marker``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if marker in line)


def hung_trial(det, context, config: Path) -> tuple[dict, str, str]:
    """Runs the experiment; returns its one trial as described, its log, and the command's output."""
    result = det("experiment", "create", config, context.directory, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    (experiment,) = det.json("experiment", "list")
    described = det.json("experiment", "describe", experiment["id"])
    assert described["state"] == "ERROR"
    (trial,) = described["trials"]
    return trial, Path(trial["log_path"]).read_text(encoding="utf-8"), output


def assert_hung(trial: dict, log: str, output: str) -> str:
    """The common checks of a hung trial; returns the recorded cause."""
    assert trial["state"] == "ERROR"
    (run,) = trial["runs"]
    error = run["error"]
    assert error["kind"] == "hang" and error["type"] == "Hang", error
    expected = f"no process made progress (a batch, a validation step, a checkpoint) for {HANG_TIMEOUT_SECONDS}"
    assert expected in error["message"], error
    for rank in (0, 1):
        assert f"Python stacks of rank {rank} (most recent call first):" in log, log[-5000:]
        # faulthandler's own lines, each prefixed by horovodrun with the rank that printed it.
        assert f"[{rank}]<stderr>:Current thread 0x" in log, log[-5000:]
    assert "Hang: no process made progress" in output, output
    return error["message"]


def test_a_rank_wedged_in_a_reducer_ends_the_trial_as_hung(det, context, helpers, cli):
    raw = helpers.fault_config(context, 20, slots=2, max_restarts=0)
    raw["hyperparameters"]["sleeping_reducer_rank"] = 1
    raw["hang_timeout_seconds"] = HANG_TIMEOUT_SECONDS
    trial, log, output = hung_trial(det, context, context.write_config(raw=raw))
    message = assert_hung(trial, log, output)
    support = cli.SUPPORT / "analytic_trial.py"
    wedged = line_of(support, "time.sleep(1)  # wedged")
    # Rank 1 sleeps in the user's reducer; rank 0 waits for it in det-estimator's combining of the metrics.
    assert f"rank 1 in cross_slot_reduce ({context.directory / 'analytic_trial.py'}:{wedged})" in message, message
    assert "rank 0 in det-estimator's " in message, message
    assert not processes_in(context.directory)


def test_a_long_validation_is_progress_not_a_hang(det, context, helpers):
    # Eight validation steps of 2 s each: 16 s without a training batch, beyond the timeout.
    raw = helpers.fault_config(context, 5, max_restarts=0, min_validation_period={"batches": 5})
    raw["hyperparameters"]["seconds_per_validation_batch"] = 2 * HANG_TIMEOUT_SECONDS / 5
    raw["hang_timeout_seconds"] = HANG_TIMEOUT_SECONDS
    result = det("experiment", "create", context.write_config(raw=raw), context.directory, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (experiment,) = det.json("experiment", "list")
    (trial,) = det.json("experiment", "describe", experiment["id"])["trials"]
    assert trial["state"] == "COMPLETED" and len(trial["runs"]) == 1
    assert [validation["batches"] for validation in trial["validations"]] == [5]


def script_config(context, tmp_path, stuck: str) -> Path:
    """tests/recovery/hang_script.py as an experiment on 2 slots, its rank 1 stuck as ``stuck`` says."""
    shutil.copy(HERE / "hang_script.py", context.directory / "hang_script.py")
    raw = {
        "name": "hang",
        "entrypoint": "python3 hang_script.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1000}},
        "resources": {"slots_per_trial": 2},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        "max_restarts": 0,
        "hang_timeout_seconds": HANG_TIMEOUT_SECONDS,
        "data": {"batches": 1000, "stuck": stuck},
    }
    return context.write_config(raw=raw)


def test_a_rank_whose_data_runs_out_early_ends_the_trial_as_hung(det, context, tmp_path):
    trial, log, output = hung_trial(det, context, script_config(context, tmp_path, "collective"))
    message = assert_hung(trial, log, output)
    script = context.directory / "hang_script.py"
    assert f"rank 0 in main ({script}:{line_of(script, 'waits here: rank 0')})" in message, message
    assert f"rank 1 in main ({script}:{line_of(script, 'waits here: rank 1')})" in message, message
    assert not processes_in(context.directory)


def test_a_rank_holding_the_interpreter_lock_dumps_its_stacks_from_the_signal(det, context, tmp_path):
    trial, log, output = hung_trial(det, context, script_config(context, tmp_path, "interpreter_lock"))
    (run,) = trial["runs"]
    message = run["error"]["message"]
    assert run["error"]["kind"] == "hang"
    script = context.directory / "hang_script.py"
    assert f"rank 0 in main ({script}:{line_of(script, 'waits here: rank 0')})" in message, message
    assert "rank 1 did not answer (a thread of it holds Python's interpreter lock" in message, message
    # faulthandler's dump from the signal handler, with the line that holds the lock.
    held = f'[1]<stderr>:  File "{script}", line {line_of(script, "holds the lock here")} in main'
    assert held in log, log[-5000:]
    assert not processes_in(context.directory)
