"""``det-estimator store copy`` end to end: a paused experiment moved from SQLite to PostgreSQL resumes there."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = str(Path(sys.executable).with_name("det-estimator"))

SLOW_BATCHES = 100  # the first run is paused long before its end, even on a busy machine; a resume runs at full speed
SLOW = {"seconds_per_batch": 0.2, "resumed_at_full_speed": True}
PASSWORD = "det-test-secret"  # tests/support/postgres.py's


@pytest.fixture
def laptop(make_det, tmp_path):
    """The command on an SQLite store (its files folder beside it, not the PostgreSQL store's)."""
    command = make_det(tmp_path / "laptop.sqlite")
    yield command
    for running in command.started:
        running.kill()


@pytest.mark.estimator  # the analytic trial is an EstimatorTrial
def test_a_paused_experiment_copied_to_postgresql_resumes_there_to_completed(laptop, make_det, postgres_url, context):
    running = laptop.start("experiment", "create", context.write_config(SLOW_BATCHES, hparams=SLOW), context.directory)
    experiment_id = int(re.search(r"Created experiment (\d+)", running.wait_for("Created experiment")).group(1))
    running.wait_for("checkpoint ")
    laptop.ok("experiment", "pause", experiment_id)
    created = running.finish()
    assert created.returncode == 0, created.stdout + created.stderr
    before = laptop.json("experiment", "describe", experiment_id)
    assert before["state"] == "PAUSED"
    laptop_files = laptop.json("store", "describe")["files_dir"]

    copied = subprocess.run(
        [COMMAND, "store", "copy", str(laptop.store), postgres_url],
        capture_output=True,
        text=True,
        env=make_det.env(),
        timeout=180,
    )
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert re.search(r"^  experiments +1 rows$", copied.stdout, re.MULTILINE), copied.stdout
    assert PASSWORD not in copied.stdout + copied.stderr

    team = make_det(postgres_url)
    team_files = team.json("store", "describe")["files_dir"]
    in_team = json.loads(json.dumps(before).replace(laptop_files, team_files))
    assert team.json("experiment", "describe", experiment_id) == in_team

    # The laptop's store gave its checkpoint folder away: it no longer resumes the experiment.
    refused = laptop("experiment", "resume", experiment_id)
    assert refused.returncode == 2 and "belongs to another det-estimator store" in refused.stderr, refused.stderr
    resumed = team.ok("experiment", "resume", experiment_id)
    assert f"Experiment {experiment_id} COMPLETED after {SLOW_BATCHES} batches." in resumed.stdout
    described = team.json("experiment", "describe", experiment_id)
    (trial,) = described["trials"]
    assert [run["state"] for run in trial["runs"]] == ["PAUSED", "COMPLETED"]
    batches = [validation["batches"] for validation in trial["validations"]]
    assert batches == sorted(set(batches)) and batches[-1] == SLOW_BATCHES, "a validation missing or recorded twice"
    # The log copied from the laptop's files goes on in the team's.
    logs = team.ok("trial", "logs", trial["id"]).stdout
    assert f"--- det-estimator: run 1 of trial {trial['id']}" in logs
    assert f"--- det-estimator: run 2 of trial {trial['id']}" in logs
