"""``trial logs`` of trials that have no log file, run in this process."""

import json
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
    assert output.startswith("Trial 1 has no log (") and "its runs were not launched by det-estimator" in output


CHATTY_SCRIPT = """
import det_estimator as det

with det.core.init() as core:
    for op in core.searcher.operations():
        for batch in range(1, op.length + 1):
            print(f"batch {batch} " + "x" * 1000, flush=True)  # far more than a pipe holds
        core.train.report_validation_metrics(op.length, {"loss": 1.0})
        op.report_completed(1.0)
"""


def test_a_log_that_cannot_be_written_is_said_so_once_and_the_trial_runs_to_its_end(det, tmp_path):
    context = tmp_path / "chatty"
    context.mkdir()
    (context / "chatty.py").write_text(CHATTY_SCRIPT)
    config = {
        "name": "chatty",
        "entrypoint": "python3 chatty.py",
        "hyperparameters": {"global_batch_size": 1},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 200}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints"},
        "max_restarts": 0,
    }
    (context / "chatty.yaml").write_text(json.dumps(config))
    # Experiment 1's trial 1 logs here; every write to /dev/full fails as on a full disk.
    log = tmp_path / "store-files" / "experiments" / "1" / "trial-1" / "output.log"
    log.parent.mkdir(parents=True)
    log.symlink_to("/dev/full")

    result = det.ok("experiment", "create", context / "chatty.yaml", context, timeout=120)

    assert result.stdout.count(f"The trial's log {log} cannot be written (No space left on device)") == 1
    assert "Experiment 1 COMPLETED after 200 batches." in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
