"""``experiment plot`` of experiments with few or no metrics, run in this process."""

import json
import sys
from pathlib import Path

import pytest

from det_estimator.store import ExperimentStore, MetricKind

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def store(tmp_path) -> Path:
    """A store holding experiment 1 (ACTIVE, no metrics reported yet) and its trial 1."""
    return record_one_experiment(tmp_path)


def test_an_experiment_without_metrics_gets_an_image_that_says_so_and_no_panels(store, tmp_path):
    output = tmp_path / "curves.png"
    status, text = run_command(["--store", str(store), "experiment", "plot", "1", "-o", str(output)])
    assert status == 0, text
    assert text == f"Experiment 1 has no metrics yet: wrote an empty plot to {output}\n"
    assert output.read_bytes()[:8] == PNG_MAGIC

    status, text = run_command(["--store", str(store), "experiment", "plot", "1", "-o", str(output), "--json"])
    assert status == 0, text
    assert json.loads(text)["panels"] == []


def test_a_trial_without_training_metrics_gets_no_empty_loss_curve(store, tmp_path):
    with ExperimentStore(store) as opened:
        (trial,) = opened.trials(1)
        run_id = opened.start_run(trial.id)
        opened.record_metrics(trial.id, MetricKind.VALIDATION, 5, {"auc": 0.75}, run_id=run_id)
    output = tmp_path / "curves.png"
    status, text = run_command(["--store", str(store), "experiment", "plot", "1", "-o", str(output), "--json"])
    assert status == 0, text
    assert json.loads(text)["panels"] == ["auc"]
