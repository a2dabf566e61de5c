"""``experiment create --hosts A:1,B:1`` on two real hosts: two network namespaces made here,
an sshd in each, the code, store and checkpoints on the shared file system.

Skipped, with the reason, only where namespaces cannot be made (not root, no sshd).
"""

import shutil
from pathlib import Path

import pytest

from tests.conftest import load_module

HERE = Path(__file__).parent
# Past this after a host died, the job counts as hung and the test fails.
HANG_SECONDS = 120

two = load_module(HERE / "two_hosts_support.py")
cli = two.cli
hosts, det = two.hosts, two.det  # the fixtures

pytestmark = two.requires_two_hosts


@pytest.fixture
def context(tmp_path):
    made = cli.Context(tmp_path / "context")
    shutil.copy(HERE.parent / "recovery" / "fault_trial.py", made.directory / "fault_trial.py")
    return made


def config(context, max_batches: int, seconds_per_batch: float = 0.0, **overrides):
    raw = context.config(
        max_batches,
        hparams={"seconds_per_batch": seconds_per_batch, "record_environment": ["TWO_HOSTS_VARIABLE"]},
        entrypoint="fault_trial:FaultTrial",
        environment={"environment_variables": ["TWO_HOSTS_VARIABLE=reached"]},
        **overrides,
    )
    return context.write_config(raw=raw)


def experiment_id(det) -> int:
    (experiment,) = det.json("experiment", "list")
    return experiment["id"]


def assert_closed_form(det, analytic, max_batches: int) -> dict:
    described = det.json("experiment", "describe", experiment_id(det))
    assert described["state"] == "COMPLETED"
    (trial,) = described["trials"]
    last = trial["validations"][-1]
    assert last["batches"] == max_batches
    expected = analytic.expected_weight(max_batches, cli.LEARNING_RATE, cli.GLOBAL_BATCH)
    assert last["metrics"]["weight"] == pytest.approx(expected, rel=1e-5)
    assert all(v["metrics"]["records"] == analytic.NUM_RECORDS for v in trial["validations"])
    return trial


def ranks_ran_on_both_hosts(context, hosts) -> None:
    # Each rank wrote the variable as its process saw it: the config's variable reached both hosts.
    import json

    for rank in (0, 1):
        seen = json.loads((context.directory / "events" / f"environment-rank{rank}.json").read_text())
        assert seen == {"TWO_HOSTS_VARIABLE": "reached"}


def test_two_hosts_train_to_the_closed_form_through_a_pause_and_a_resume(det, context, hosts, analytic):
    running = det.start(
        "experiment", "create", config(context, 30, seconds_per_batch=0.1), context.directory, "--hosts", hosts.hosts
    )
    running.wait_for("checkpoint ")
    det.ok("experiment", "pause", experiment_id(det))
    paused = running.finish(timeout=HANG_SECONDS + 60)
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert det.json("experiment", "describe", experiment_id(det))["state"] == "PAUSED"
    det.ok("experiment", "resume", experiment_id(det), timeout=HANG_SECONDS + 180)
    trial = assert_closed_form(det, analytic, 30)
    assert [run["state"] for run in trial["runs"]] == ["PAUSED", "COMPLETED"]
    assert trial["runs"][1]["start_batches"] > 0
    ranks_ran_on_both_hosts(context, hosts)


def test_a_host_that_dies_ends_the_job_and_the_experiment_resumes(det, context, hosts, analytic):
    running = det.start(
        "experiment",
        "create",
        config(context, 30, seconds_per_batch=0.1, max_restarts=0),
        context.directory,
        "--hosts",
        hosts.hosts,
    )
    running.wait_for("checkpoint ")
    hosts.kill_host(hosts.b)
    ended = running.finish(timeout=HANG_SECONDS)
    assert ended.returncode == 1, ended.stdout + ended.stderr
    described = det.json("experiment", "describe", experiment_id(det))
    assert described["state"] == "ERROR"
    (trial,) = described["trials"]
    kept = [c for c in det.json("checkpoint", "list", experiment_id(det)) if c["state"] == "COMPLETED"]
    assert kept, "the checkpoint written before the host died is kept"
    hosts.start_sshd(hosts.b)  # the host is back
    det.ok("experiment", "resume", experiment_id(det), timeout=HANG_SECONDS + 180)
    trial = assert_closed_form(det, analytic, 30)
    assert [run["state"] for run in trial["runs"]] == ["ERROR", "COMPLETED"]
    assert trial["runs"][1]["start_batches"] >= min(c["batches"] for c in kept)
