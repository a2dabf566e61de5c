"""The command on a store in a PostgreSQL database: an experiment run, paused and resumed, read back, and the errors."""

import re
import shutil
import time
from pathlib import Path

import pytest
import yaml

from det_estimator.store._launchers import LEASE_SECONDS

SUPPORT = Path(__file__).parents[1] / "support"
BATCHES = 10
SLOW_BATCHES = 100  # the first run is paused long before its end, even on a busy machine; a resume runs at full speed
SLOW = {"seconds_per_batch": 0.2, "resumed_at_full_speed": True}
PASSWORD = "det-test-secret"  # tests/support/postgres.py's
# How long the server is away in the middle of a run.
SERVER_AWAY_SECONDS = 15


def created_id(output: str) -> int:
    match = re.search(r"^Created experiment (\d+) \(trial (\d+)\)", output, re.MULTILINE)
    assert match, f"no 'Created experiment' line in:\n{output}"
    return int(match.group(1))


def files_holding(folder: Path, text: str) -> list[Path]:
    """The files under ``folder`` whose bytes hold ``text``."""
    return [path for path in folder.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


@pytest.fixture
def pg_det(make_det, postgres_url):
    """The command on a store in a new, empty PostgreSQL database; what a failed test left running is killed."""
    command = make_det(postgres_url)
    yield command
    for running in command.started:
        running.kill()


# A fault injected into a real job, with a server away 15 s: a long run. The store's waiting
# out of a lost server, and its lost COMMIT, run every time in tests/store/test_postgresql_faults.py.
@pytest.mark.slow
@pytest.mark.estimator  # the analytic trial is an EstimatorTrial
@pytest.mark.horovod  # on 2 processes
@pytest.mark.timeout(400)
def test_an_experiment_on_postgresql_outlives_a_server_restart_pauses_resumes_once_and_reads_back_without_its_password(
    pg_det, context, tmp_path, postgres_server
):
    det = pg_det
    config = context.write_config(SLOW_BATCHES, hparams=SLOW, resources={"slots_per_trial": 2})
    running = det.start("experiment", "create", config, context.directory)
    experiment_id = created_id(running.wait_for("Created experiment"))
    # The server crashes once a validation is recorded, and is back in seconds: the run waits for it.
    running.wait_for("validation after ")
    postgres_server.kill()
    time.sleep(SERVER_AWAY_SECONDS)
    postgres_server.start()
    running.wait_for("checkpoint ")
    paused = det.ok("experiment", "pause", experiment_id)
    created = running.finish()
    assert created.returncode == 0, created.stdout + created.stderr
    assert det.experiment(experiment_id)["state"] == "PAUSED"

    # As if it ran on another machine, whose launcher beats: it is ACTIVE there, and a resume here is refused.
    database = det.store.rsplit("/", 1)[1]
    postgres_server.sql(
        database,
        "UPDATE experiments SET state = 'ACTIVE', launcher_host = 'host2',"
        f" launcher_seen_at = EXTRACT(EPOCH FROM now()) WHERE id = {experiment_id}",
    )
    assert det.experiment(experiment_id)["state"] == "ACTIVE"
    refused = det("experiment", "resume", experiment_id)
    assert (
        refused.returncode == 2 and f"Experiment {experiment_id} is ACTIVE: it is running (process " in refused.stderr
    )
    assert " on host2); nothing to resume." in refused.stderr
    # That machine went down: a lease later, by the database server's clock, it reads INTERRUPTED, and resumes here.
    postgres_server.sql(
        database,
        f"UPDATE experiments SET launcher_seen_at = launcher_seen_at - {LEASE_SECONDS} WHERE id = {experiment_id}",
    )
    assert det.experiment(experiment_id)["state"] == "INTERRUPTED"

    # Two launchers race to resume it: the store's write lock lets exactly one claim it.
    resumes = det.start("experiment", "resume", experiment_id), det.start("experiment", "resume", experiment_id)
    results = sorted((resume.finish() for resume in resumes), key=lambda result: result.returncode)
    assert [result.returncode for result in results] == [0, 2], [r.stdout + r.stderr for r in results]
    assert f"Experiment {experiment_id} is being run by process" in results[1].stderr or (
        "is ACTIVE: it is running" in results[1].stderr
    )
    assert f"Experiment {experiment_id} COMPLETED after {SLOW_BATCHES} batches." in results[0].stdout

    [listed] = det.json("experiment", "list")
    assert (listed["id"], listed["state"], listed["batches_trained"]) == (experiment_id, "COMPLETED", SLOW_BATCHES)
    described = det.json("experiment", "describe", experiment_id)
    (trial,) = described["trials"]
    assert [run["state"] for run in trial["runs"]] == ["PAUSED", "COMPLETED"]
    # Every record the runs wrote, as the database holds it: the validation and the checkpoint
    # the config asks for every 5 batches, and the checkpoint of the pause, each once, in
    # order: none lost, none written twice over the server's restart.
    expected = list(range(5, SLOW_BATCHES + 1, 5))
    validations = postgres_server.sql(database, "SELECT batches FROM metrics WHERE kind = 'validation' ORDER BY id")
    assert [int(batches) for batches in validations.split()] == expected
    assert [validation["batches"] for validation in trial["validations"]] == expected
    checkpoints = postgres_server.sql(database, "SELECT batches FROM checkpoints ORDER BY created_at")
    paused_at = trial["runs"][1]["start_batches"]
    assert [int(batches) for batches in checkpoints.split()] == sorted({*expected, paused_at})
    logs = det.ok("trial", "logs", trial["id"])
    # Both runs' output, read from the database.
    assert f"--- det-estimator: run 1 of trial {trial['id']}" in logs.stdout
    assert f"--- det-estimator: run 2 of trial {trial['id']}" in logs.stdout
    store = det.json("store", "describe")
    assert store["path"] == det.store.replace(PASSWORD, "***")
    assert Path(store["files_dir"]) == tmp_path / "store-files"  # DET_ESTIMATOR_STORE_FILES, set for every test

    said = [paused, created, *results, logs]
    assert not [line for result in said for line in (result.stdout + result.stderr).splitlines() if PASSWORD in line]
    # The resume hint names the store without it: pasted into a shell with PGPASSWORD or ~/.pgpass, it works.
    bare = det.store.replace(f":{PASSWORD}@", "@")
    assert f"Resume with: det-estimator --store {bare} experiment resume {experiment_id}" in created.stdout
    # Nor is it in any file the run left: logs, event files, checkpoints' metadata.
    assert files_holding(tmp_path / "store-files", PASSWORD) == []
    assert files_holding(context.directory, PASSWORD) == []


@pytest.mark.any_stack  # the store alone, the same on both stacks
def test_a_reading_command_on_an_empty_database_makes_no_store_there(pg_det, postgres_server):
    listed = pg_det("experiment", "list")
    assert listed.returncode == 2
    assert "There is no experiment store in the database" in listed.stderr and PASSWORD not in listed.stderr
    database = pg_det.store.rsplit("/", 1)[1]
    tables = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
    assert postgres_server.sql(database, tables).strip() == "0"


@pytest.mark.any_stack
@pytest.mark.parametrize(
    "fault, said",
    [
        ("port", "Connection refused"),
        ("password", 'password authentication failed for user "det_test"'),
        ("database", 'database "no_such_database" does not exist'),
        ("role", 'for user "no_such_role"'),
    ],
)
def test_a_store_that_cannot_be_reached_is_a_clear_error_with_nothing_recorded(
    make_det, postgres_server, postgres_url, context, fault, said
):
    database = postgres_url.rsplit("/", 1)[1]
    url = {
        "port": postgres_url.replace(f":{postgres_server.port}/", ":1/"),
        "password": postgres_server.url(database, password="wrong-secret"),
        "database": postgres_server.url("no_such_database"),
        "role": postgres_server.url(database, user="no_such_role"),
    }[fault]
    det = make_det(url)
    for args in [("experiment", "create", context.write_config(10), context.directory), ("experiment", "list")]:
        result = det(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        assert said in result.stderr and "Cannot reach the store postgresql://" in result.stderr
        assert PASSWORD not in result.stderr + result.stdout and "wrong-secret" not in result.stderr + result.stdout
        assert "Traceback" not in result.stderr
    tables = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
    assert postgres_server.sql(database, tables).strip() == "0"


def _shape(value):
    """The JSON value's keys and kinds, recursively: what two stores' views of one search must share."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__ if value is not None else None


@pytest.mark.any_stack  # a NumPy-free script: the same on both stacks
def test_a_search_records_the_same_on_postgresql_as_on_sqlite(make_det, postgres_url, tmp_path):
    # A NumPy-free script of the Core API: it runs on either stack.
    search = tmp_path / "search"
    search.mkdir()
    shutil.copy(SUPPORT / "search_script.py", search / "search_script.py")
    config = {
        "name": "search",
        "entrypoint": "python3 search_script.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}, "seconds_per_batch": 0.02},
        "searcher": {"name": "random", "metric": "loss", "max_trials": 3, "max_length": {"batches": BATCHES}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 1},
        "reproducibility": {"experiment_seed": 11},
        "max_restarts": 0,
    }
    (search / "search.yaml").write_text(yaml.safe_dump(config))

    described = {}
    # The SQLite store's files beside it, apart from the PostgreSQL store's (DET_ESTIMATOR_STORE_FILES).
    (tmp_path / "sqlite").mkdir()
    for name, store in [("sqlite", tmp_path / "sqlite" / "store.sqlite"), ("postgresql", postgres_url)]:
        det = make_det(store)
        det.ok("experiment", "create", search / "search.yaml", search, "--slots", "2")
        described[name] = det.json("experiment", "describe", 1)

    on_sqlite, on_postgresql = described["sqlite"], described["postgresql"]
    assert on_postgresql["state"] == "COMPLETED"
    for trial in on_postgresql["trials"]:
        x = trial["hparams"]["x"]
        assert trial["validations"][-1]["metrics"]["loss"] == pytest.approx((x - 0.3) ** 2 + 1.0 / BATCHES)
    # The same seed, the same search: the same trials and validations, and the same shape of record.
    assert [t["hparams"] for t in on_postgresql["trials"]] == [t["hparams"] for t in on_sqlite["trials"]]
    assert [[v["metrics"] for v in t["validations"]] for t in on_postgresql["trials"]] == [
        [v["metrics"] for v in t["validations"]] for t in on_sqlite["trials"]
    ]
    assert _shape(on_postgresql) == _shape(on_sqlite)

    # Another machine, where the store's files folder is not: the trials' logs come from the database.
    shutil.move(tmp_path / "store-files", tmp_path / "on-the-first-machine")  # DET_ESTIMATOR_STORE_FILES
    for trial in on_postgresql["trials"]:
        logs = det.ok("trial", "logs", trial["id"])
        assert logs.stdout.startswith(f"--- det-estimator: run 1 of trial {trial['id']}, "), logs.stdout
