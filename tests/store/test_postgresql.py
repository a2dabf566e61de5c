"""A store in a PostgreSQL database: how it is named, made, recognised, refused, and how its writers take turns."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from det_estimator.store import (
    SCHEMA_VERSION,
    STORE_VARIABLE,
    ExperimentStore,
    NoStoreError,
    StoreLocation,
    StoreUnusableError,
    folder_owner,
    parse_store_location,
)

PASSWORD = "det-test-secret"  # tests/support/postgres.py's


# Where a store is.


def test_a_path_is_an_sqlite_file_and_a_postgresql_url_a_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_store_location("runs/store.sqlite", "--store") == StoreLocation(
        path=tmp_path / "runs" / "store.sqlite"
    )
    for url in ["postgresql://bob:s3cret@db.example:5433/team", "postgresql+psycopg://bob:s3cret@db.example:5433/team"]:
        location = parse_store_location(url, "--store")
        assert location.path is None and location.url == url
        assert location.shown == "postgresql://bob:***@db.example:5433/team"
        assert location.passed_on == url  # the processes of a run get the password they need
        assert location.sqlalchemy_url().drivername == "postgresql+psycopg"
        assert "s3cret" not in repr(location) and "s3cret" not in str(location)
        # A command to paste, or one run by the web page, names it without; its environment gives it.
        assert location.without_password == "postgresql://bob@db.example:5433/team"
        assert location.environment() == {"PGPASSWORD": "s3cret"}


def test_a_postgresql_url_without_a_database_is_refused_naming_the_forms_accepted():
    with pytest.raises(StoreUnusableError, match="names no database") as refused:
        parse_store_location("postgresql://bob:s3cret@db.example", "--store")
    assert "s3cret" not in str(refused.value) and "postgresql://USER" in str(refused.value)


def test_the_variable_names_a_postgresql_store_as_the_option_does(monkeypatch, postgres_url):
    monkeypatch.setenv(STORE_VARIABLE, postgres_url)
    with ExperimentStore() as store:
        assert store.location == StoreLocation(url=postgres_url)


# Made once, recognised, refused.


def test_a_new_store_is_made_with_its_marker_and_its_files_folder(postgres_server, postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DET_ESTIMATOR_STORE_FILES", str(tmp_path / "team-files"))
    with ExperimentStore(postgres_url) as store:
        store.own_folders(None)
        store_id = store.store_id
        assert store.files_dir == tmp_path / "team-files"
    database = postgres_url.rsplit("/", 1)[1]
    row = postgres_server.sql(database, "SELECT application, schema_version, store_id, home, files_dir FROM store_info")
    home = postgres_url.replace(PASSWORD, "***")
    assert row.strip().split("|") == [
        "det-estimator",
        str(SCHEMA_VERSION),
        store_id,
        home,
        str(tmp_path / "team-files"),
    ]
    owner = folder_owner(tmp_path / "team-files")
    assert owner is not None and (owner.store_id, owner.store_path) == (store_id, home)
    # Opened again, it is the same store, its files where they were, whatever the variable says now.
    monkeypatch.setenv("DET_ESTIMATOR_STORE_FILES", str(tmp_path / "elsewhere"))
    with ExperimentStore(postgres_url) as again:
        assert (again.store_id, again.files_dir) == (store_id, tmp_path / "team-files")


def test_the_files_folder_defaults_to_one_per_database_under_xdg_data_home(
    postgres_server, postgres_url, tmp_path, monkeypatch
):
    monkeypatch.delenv("DET_ESTIMATOR_STORE_FILES")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with ExperimentStore(postgres_url) as store:
        database = postgres_url.rsplit("/", 1)[1]
        expected = tmp_path / "data" / "det-estimator" / f"127.0.0.1-{postgres_server.port}-{database}-files"
        assert store.files_dir == expected and expected.is_dir()


def test_a_files_folder_that_cannot_be_written_is_refused_and_nothing_is_recorded(
    postgres_server, postgres_url, tmp_path, monkeypatch
):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("DET_ESTIMATOR_STORE_FILES", str(blocked / "files"))

    with pytest.raises(StoreUnusableError, match="Expected a folder this user can write") as refused:
        ExperimentStore(postgres_url)
    assert "DET_ESTIMATOR_STORE_FILES" in str(refused.value) and PASSWORD not in str(refused.value)
    database = postgres_url.rsplit("/", 1)[1]
    assert (
        postgres_server.sql(
            database, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).strip()
        == "0"
    )


def test_a_database_of_another_application_is_refused_naming_its_tables_and_left_as_it_is(
    postgres_server, postgres_url
):
    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.sql(
        database, "CREATE TABLE orders (id serial PRIMARY KEY, item text); INSERT INTO orders (item) VALUES ('tea')"
    )
    before = postgres_server.sql(
        database, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )

    with pytest.raises(
        StoreUnusableError, match=r"holds tables that det-estimator did not make \(its tables: orders\)"
    ) as refused:
        ExperimentStore(postgres_url)

    assert PASSWORD not in str(refused.value)
    assert (
        postgres_server.sql(database, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        == before
    )
    assert postgres_server.sql(database, "SELECT item FROM orders").strip() == "tea"


def test_a_store_of_a_newer_schema_is_refused(postgres_server, postgres_url):
    ExperimentStore(postgres_url).close()
    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.sql(database, f"UPDATE store_info SET schema_version = {SCHEMA_VERSION + 1}")

    with pytest.raises(
        StoreUnusableError, match=f"has schema version {SCHEMA_VERSION + 1}, made by a newer det-estimator"
    ):
        ExperimentStore(postgres_url)


def test_reading_an_empty_database_makes_no_store_there(postgres_server, postgres_url):
    with pytest.raises(NoStoreError, match="There is no experiment store in the database"):
        ExperimentStore(postgres_url, create=False)
    database = postgres_url.rsplit("/", 1)[1]
    assert (
        postgres_server.sql(
            database, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).strip()
        == "0"
    )


OPEN_AND_CLAIM = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from det_estimator.store import ExperimentBusyError, ExperimentStore

    url, experiment_id, go, done = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])

    def wait_for(flag):
        while not flag.exists():
            time.sleep(0.002)

    if not experiment_id:  # the race is to make the store
        wait_for(go)
    store = ExperimentStore(url)
    print("ready", flush=True)
    wait_for(go)  # the race is to claim the experiment: every process has its connection already
    try:
        if experiment_id:
            store.claim(experiment_id)
        print(json.dumps({"store_id": store.store_id, "claimed": True}), flush=True)
    except ExperimentBusyError:
        print(json.dumps({"store_id": store.store_id, "claimed": False}), flush=True)
    # A claim holds while its launcher lives: stay alive until every other has tried.
    wait_for(done)
    store.close()
    """
)


def _race(tmp_path: Path, url: str, experiment_id: int, count: int) -> list[dict]:
    go, done = tmp_path / "go", tmp_path / "done"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AND_CLAIM, url, str(experiment_id), str(go), str(done)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    try:
        if not experiment_id:
            go.touch()
        assert [process.stdout.readline().strip() for process in processes] == ["ready"] * count
        go.touch()
        said = [json.loads(process.stdout.readline()) for process in processes]
    finally:
        done.touch()
        for process in processes:
            process.wait(timeout=120)
    assert [process.returncode for process in processes] == [0] * count
    return said


def test_processes_making_one_store_at_once_make_it_once(tmp_path, postgres_server, postgres_url):
    said = _race(tmp_path, postgres_url, 0, 4)

    assert len({each["store_id"] for each in said}) == 1
    database = postgres_url.rsplit("/", 1)[1]
    assert postgres_server.sql(database, "SELECT count(*) FROM store_info").strip() == "1"


def test_of_processes_claiming_one_experiment_at_once_exactly_one_wins(tmp_path, postgres_url):
    with ExperimentStore(postgres_url) as store:
        experiment_id = store.create_experiment("race", {}, "/context", "model_def:Trial", 1, False)
        store.set_state(experiment_id, "PAUSED")
        store.set_launcher(experiment_id, os.getpid())
    # The launcher recorded must be gone for any claim to win: one that ended.
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    with ExperimentStore(postgres_url) as store:
        store.set_launcher(experiment_id, int(ended.stdout))

    said = _race(tmp_path, postgres_url, experiment_id, 4)

    assert sorted(each["claimed"] for each in said) == [False, False, False, True]


# Errors: each a clear message naming what failed, the password never shown.


def _refusal(url: str) -> str:
    with pytest.raises(StoreUnusableError) as refused:
        ExperimentStore(url)
    message = str(refused.value)
    assert PASSWORD not in message and "wrong-secret" not in message
    return message


def test_a_server_that_is_not_there_is_said_so(postgres_server):
    closed = postgres_server.url("anything").replace(f":{postgres_server.port}/", ":1/")
    assert "Connection refused" in _refusal(closed)


def test_a_wrong_password_a_missing_database_and_a_missing_role_are_each_said_so(postgres_server, postgres_url):
    database = postgres_url.rsplit("/", 1)[1]
    assert 'password authentication failed for user "det_test"' in _refusal(
        postgres_server.url(database, password="wrong-secret")
    )
    assert 'database "no_such_database" does not exist' in _refusal(postgres_server.url("no_such_database"))
    assert 'for user "no_such_role"' in _refusal(postgres_server.url(database, user="no_such_role"))


def test_the_password_may_come_from_pgpassword_or_pgpass(postgres_server, postgres_url, tmp_path, monkeypatch):
    database = postgres_url.rsplit("/", 1)[1]
    bare = postgres_server.url(database, password=None)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PGPASSFILE", raising=False)
    assert "password" in _refusal(bare)  # none given anywhere

    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with ExperimentStore(bare) as store:
        store_id = store.store_id

    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(f"127.0.0.1:{postgres_server.port}:{database}:det_test:{PASSWORD}\n")
    pgpass.chmod(0o600)
    with ExperimentStore(bare) as store:
        assert store.store_id == store_id
