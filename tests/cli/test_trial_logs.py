"""``trial logs`` of trials that have no log file, run in this process."""

import sys
from pathlib import Path

import pytest

from det_estimator.store import ExperimentStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402


@pytest.fixture
def store(tmp_path) -> Path:
    """A store holding experiment 1 and its trial 1, not started."""
    return record_one_experiment(tmp_path)


def test_a_trial_not_started_has_no_log_yet(store):
    status, output = run_command(["--store", str(store), "trial", "logs", "1"])
    assert status == 1 and output.startswith("Trial 1 has no log yet ("), output


def test_a_trial_run_in_its_callers_process_is_said_to_print_its_output_where_it_runs(store):
    with ExperimentStore(store) as opened:
        (trial,) = opened.trials(1)
        opened.start_run(trial.id)  # as run_trial on one slot and a script run by hand do, with no log file
    status, output = run_command(["--store", str(store), "trial", "logs", "1"])
    assert status == 1, output
    assert output.startswith("Trial 1 has no log at ") and "its runs were not launched by det-estimator" in output
