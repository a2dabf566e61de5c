"""A hyperparameter search over EstimatorTrials, through the command: each trial follows its own closed form."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SUPPORT = Path(__file__).parent.parent / "support"
COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_a_grid_search_of_estimator_trials_runs_them_side_by_side_each_to_its_closed_form(analytic, tmp_path):
    context_dir = tmp_path / "code"
    context_dir.mkdir()
    shutil.copy(SUPPORT / "analytic_trial.py", context_dir)
    config = analytic.make_config(tmp_path, 10)
    config["hyperparameters"]["learning_rate"] = {"type": "categorical", "vals": [0.01, 0.02]}
    config["searcher"] = {**config["searcher"], "name": "grid", "max_concurrent_trials": 2}
    (context_dir / "search.yaml").write_text(yaml.safe_dump(config))
    store = tmp_path / "store.sqlite"

    def det(*args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        command = [COMMAND, "--store", str(store), *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=280)

    created = det("experiment", "create", str(context_dir / "search.yaml"), str(context_dir), "--slots", "2")
    assert created.returncode == 0, created.stdout + created.stderr
    described = json.loads(det("experiment", "describe", "1", "--json").stdout)
    assert described["state"] == "COMPLETED"
    trials = described["trials"]
    assert sorted(trial["hparams"]["learning_rate"] for trial in trials) == [0.01, 0.02]
    for trial in trials:
        rate = trial["hparams"]["learning_rate"]
        assert trial["state"] == "COMPLETED" and trial["validations"]
        for validation in trial["validations"]:
            expected = analytic.expected_weight(validation["batches"], rate, 8)
            assert validation["metrics"]["weight"] == pytest.approx(expected, rel=1e-5)
    runs = [(run["started_at"], run["ended_at"]) for trial in trials for run in trial["runs"]]
    assert max(start for start, _ in runs) < min(end for _, end in runs), "the two trials ran at the same time"
