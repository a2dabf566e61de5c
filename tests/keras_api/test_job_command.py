"""det-estimator job run/list/logs: bad input is refused with a message and exit status 2; a job records its end."""

import datetime
import json

import pytest
import yaml

from det_estimator.orchestration._jobs import JobConfigError, load_job_config
from det_estimator.store import ExperimentStore


def write(path, raw) -> str:
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"entrypoint_script": "python3 job.py"}, "needs a `data` mapping"),
        ({"entrypoint_script": "python3 job.py", "data": [1, 2]}, "needs a `data` mapping"),
        ({"data": {"a": 1}}, "needs the command to run"),
        ({"entrypoint": "model_def:Trial", "data": {}}, "needs the command to run"),
        ({"entrypoint_script": "python3 job.py", "data": {}, "searcher": {}}, "Unknown key 'searcher'"),
        (
            {"entrypoint_script": "python3 job.py", "data": {}, "environment": {"environment_variables": "X"}},
            "job config: `environment.environment_variables` must be",
        ),
        ({"entrypoint_script": "python3 job.py", "data": {}, "resources": {"slots": 0}}, "positive integer"),
        ({"entrypoint": "python3 job.py", "entrypoint_script": "python3 job.py", "data": {}}, "not both"),
        (
            {"entrypoint_script": "python3 'job.py", "data": {}},
            "The job config's entrypoint_script \"python3 'job.py\" cannot be split into words: No closing quotation",
        ),
        (
            {"entrypoint_script": "python3 job.py", "data": {"since": datetime.date(2024, 1, 31)}},
            "job config: `data.since` must be a JSON value (null, a boolean, a number, a string, a list or a mapping)",
        ),
        ({"entrypoint_script": "python3 job.py", "data": {}, "name": [1, 2]}, "`name` of a job config must be"),
        ({"entrypoint_script": "python3 job.py a\0b", "data": {}}, "has a NUL character, which no command line"),
    ],
)
def test_a_bad_job_config_is_refused_with_exit_status_2(tmp_path, det, raw, message):
    (tmp_path / "job.py").write_text("print('never run')\n")
    result = det(tmp_path / "store.sqlite", "job", "run", write(tmp_path / "job.yaml", raw), tmp_path, check=False)
    assert result.returncode == 2
    assert message in result.stderr and "job.yaml" in result.stderr


def test_a_missing_config_context_or_script_is_refused_with_exit_status_2(tmp_path, det):
    store = tmp_path / "store.sqlite"
    missing = det(store, "job", "run", tmp_path / "nope.yaml", tmp_path, check=False)
    assert missing.returncode == 2 and "is not a file" in missing.stderr
    config = write(tmp_path / "job.yaml", {"entrypoint_script": "python3 absent.py", "data": {}})
    no_dir = det(store, "job", "run", config, tmp_path / "nowhere", check=False)
    assert no_dir.returncode == 2 and "is not a directory" in no_dir.stderr
    no_script = det(store, "job", "run", config, tmp_path, check=False)
    assert no_script.returncode == 2 and "absent.py" in no_script.stderr
    (tmp_path / "present.py").write_text("print('never run')\n")
    present = write(tmp_path / "present.yaml", {"entrypoint_script": "python3 present.py", "data": {}})
    too_many = det(store, "job", "run", present, tmp_path, "--slots", 4096, check=False)
    assert too_many.returncode == 2 and "4096 slots asked for, but this machine's" in too_many.stderr
    assert "--hosts" not in too_many.stderr and "never run" not in too_many.stdout
    assert not store.exists()  # a refused job makes no store
    ExperimentStore(store).close()
    unknown = det(store, "job", "logs", 42, check=False)
    assert unknown.returncode == 2 and "There is no job 42" in unknown.stderr
    assert det(store, "job", "list").stdout.startswith("No jobs yet")


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_job_runs_its_script_with_its_data_and_records_how_it_ended(tmp_path, det, database, request):
    # On PostgreSQL, its log is in the database: read back, and the cause of its failure read from it.
    store = tmp_path / "store.sqlite" if database == "sqlite" else request.getfixturevalue("postgres_url")
    (tmp_path / "job.py").write_text(
        "import json, det_estimator as det\n"
        "info = det.get_cluster_info()\n"
        "print('DATA', json.dumps(info.user_data), info.task_type, info.trial)\n"
        "import os; print('THREADS', os.environ.get('OMP_NUM_THREADS'))\n"
    )
    (tmp_path / "fails.py").write_text("raise RuntimeError('no model here')\n")
    ok = det(
        store,
        "job",
        "run",
        write(
            tmp_path / "ok.yaml",
            {
                "entrypoint_script": "python3 job.py",
                "data": {"n": 3},
                "environment": {"environment_variables": ["OMP_NUM_THREADS=3"], "image": "ignored:latest"},
            },
        ),
        tmp_path,
    )
    assert "Job 1 COMPLETED" in ok.stdout
    assert "job config: ignored 1 key(s) that matter only on a cluster: `environment.image`" in ok.stderr
    logs = det(store, "job", "logs", 1).stdout
    assert 'DATA {"n": 3} BATCH_INFERENCE None' in logs and "THREADS 3" in logs

    failed = det(
        store,
        "job",
        "run",
        write(tmp_path / "bad.yaml", {"entrypoint": "python3 fails.py", "data": {}}),
        tmp_path,
        check=False,
    )
    assert failed.returncode == 1 and "RuntimeError: no model here" in failed.stderr
    # The hint names the store it was given: pasted into the same shell, it finds the job.
    shown = str(store).replace(":det-test-secret@", "@")
    assert f"its output: det-estimator --store {shown} job logs 2" in failed.stdout
    assert "RuntimeError: no model here" in det(store, "job", "logs", 2).stdout
    jobs = json.loads(det(store, "job", "list", "--json").stdout)
    assert [(job["name"], job["state"], job["exit_status"]) for job in jobs] == [
        ("ok", "COMPLETED", 0),
        ("bad", "ERROR", 1),
    ]
    assert jobs[1]["error"]["message"] == "RuntimeError: no model here"
    assert "ok" in det(store, "job", "list").stdout


def test_a_failed_job_shows_the_root_cause_without_det_estimators_frames(tmp_path, det):
    store = tmp_path / "store.sqlite"
    (tmp_path / "loads.py").write_text(
        "import det_estimator as det\n"
        "with det.keras.init() as context:\n"
        "    context.load_checkpoint_model(trial_id=99)\n"
    )
    failed = det(
        store,
        "job",
        "run",
        write(tmp_path / "loads.yaml", {"entrypoint_script": "python3 loads.py", "data": {}}),
        tmp_path,
        check=False,
    )
    # As a failed trial's: det-estimator's own error is its message, without the frames that raised it.
    assert failed.returncode == 1
    assert f"Job 1 failed on rank 0:\nUnknownIdError: There is no trial 99 in the store {store}." in failed.stderr
    assert "Traceback" not in failed.stderr and "det_estimator" not in failed.stderr, failed.stderr
    (job,) = json.loads(det(store, "job", "list", "--json").stdout)
    assert job["error"]["type"] == "UnknownIdError" and job["error"]["rank"] == 0
    # The whole traceback stays in the job's log.
    assert "det_estimator/store/" in det(store, "job", "logs", 1).stdout


def test_slots_come_from_the_command_line_then_the_config():
    raw = {"entrypoint_script": "python3 job.py", "data": {}, "resources": {"slots": 3}}
    assert load_job_config(raw).slots == 3
    assert load_job_config(raw, slots=2).slots == 2
    assert load_job_config({**raw, "resources": {"slots_per_trial": 4}}).slots == 4
    assert load_job_config({"entrypoint_script": "python3 job.py", "data": {}}).command == ("python3", "job.py")
    with pytest.raises(JobConfigError, match="mapping of keys"):
        load_job_config(["not", "a", "mapping"])
