"""experiment list sweeps what killed checkpoint writes left in experiments that no longer run."""

import sys
from pathlib import Path

from det_estimator.store import ExperimentStore, State

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402


def test_experiment_list_removes_what_a_killed_checkpoint_write_left_in_an_experiment_that_no_longer_runs(tmp_path):
    path = record_one_experiment(tmp_path)
    with ExperimentStore(path) as store:
        (trial,) = store.trials(1)
        store.set_state(1, State.PAUSED)
    left = Path(trial.checkpoint_dir) / ".partial-0123"
    (left / "model").mkdir(parents=True)

    status, output = run_command(["--store", str(path), "experiment", "list"])

    assert status == 0, output
    assert not left.exists() and Path(trial.checkpoint_dir).is_dir()
