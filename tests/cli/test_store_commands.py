"""The command and a store's identity: another application's database untouched, a copy read-only, ``store detach``,
and ``store upgrade`` of a store of an older schema."""

import contextlib
import hashlib
import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from det_estimator.store import SCHEMA_VERSION, ExperimentStore, State, folder_owner
from det_estimator.store._schema import MIGRATIONS, migrate
from det_estimator.ui import Access, Settings, create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402

# Every command that opens a store, with the arguments it needs ({dir}: the case's folder).
COMMANDS = [
    ["experiment", "list"],
    ["experiment", "list", "--json"],
    ["experiment", "describe", "1"],
    ["experiment", "create", "{dir}/ok.yaml", "{dir}"],
    ["experiment", "pause", "1"],
    ["experiment", "resume", "1"],
    ["experiment", "plot", "1", "-o", "{dir}/curves.png"],
    ["trial", "list", "1"],
    ["trial", "describe", "1"],
    ["trial", "logs", "1"],
    ["checkpoint", "list", "1"],
    ["checkpoint", "describe", "0123abcd"],
    ["checkpoint", "download", "0123abcd", "-o", "{dir}/out"],
    ["job", "list"],
    ["job", "logs", "1"],
    ["store", "describe"],
    ["store", "detach"],
    ["store", "upgrade"],
]


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> SHA-256 of its bytes)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_another_applications_database_is_untouched_byte_for_byte_after_every_command(tmp_path, journal_mode):
    record_one_experiment(tmp_path / "context")  # the analytic trial and ok.yaml, for `experiment create`
    for name in ("analytic_trial.py", "analytic_closed_form.py", "ok.yaml"):
        shutil.copy(tmp_path / "context" / name, tmp_path / name)
    shutil.rmtree(tmp_path / "context")
    places = tmp_path / "places.sqlite"
    with contextlib.closing(sqlite3.connect(places)) as connection:
        connection.execute(f"PRAGMA journal_mode = {journal_mode}")
        connection.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        connection.execute("INSERT INTO moz_places (url) VALUES ('https://example.org')")
        connection.commit()
    before = tree_digest(tmp_path)

    for command in COMMANDS:
        argv = ["--store", str(places), *(part.format(dir=tmp_path) for part in command)]
        status, output = run_command(argv)
        assert status == 2, (command, output)
        assert f"{places} is an SQLite database that det-estimator did not make (its tables: moz_places)" in output
        assert "Traceback" not in output
        assert tree_digest(tmp_path) == before, command  # nor a -files folder, a -wal, or checkpoints made

    app = create_app(Settings(places, Access("a-token-of-enough-characters-0123", loopback=True)))
    page = TestClient(app, base_url="http://127.0.0.1:8080").get("/")
    assert page.status_code == 503 and "that det-estimator did not make" in page.text
    assert tree_digest(tmp_path) == before


@pytest.fixture
def original_and_copy(tmp_path) -> tuple[Path, Path]:
    """A store with experiment 1 (PAUSED, its checkpoint folder claimed), and a copy of it beside it."""
    path = record_one_experiment(tmp_path)
    with ExperimentStore(path) as store:
        store.set_state(1, State.PAUSED)
        store.own_folders(1)
    copy = tmp_path / "copy.sqlite"
    shutil.copy(path, copy)
    return path, copy


def test_a_copy_is_read_only_with_a_message_until_detached(original_and_copy, tmp_path):
    original, copy = original_and_copy
    with ExperimentStore(original) as store:
        (trial,) = store.trials(1)
        store_id = store.store_id
    folder = Path(trial.checkpoint_dir).parent
    before = tree_digest(folder)

    for command in (["experiment", "resume", "1"], ["experiment", "pause", "1"], ["experiment", "create", "{ok}", "."]):
        argv = [part.format(ok=tmp_path / "ok.yaml") for part in command]
        status, output = run_command(["--store", str(copy), *argv])
        assert status == 2, output
        assert f"The store {copy} is a copy of the store {original} (both are store {store_id})" in output
        assert f"det-estimator --store {copy} store detach" in output
    status, output = run_command(["--store", str(copy), "experiment", "list"])
    assert status == 0 and f"note: the store {copy} is a copy of {original}, and read-only" in output, output
    assert tree_digest(folder) == before
    with ExperimentStore(copy) as store:
        assert store.experiments()[0].state == State.PAUSED and len(store.experiments()) == 1

    status, output = run_command(["--store", str(copy), "store", "detach", "--json"])
    assert status == 0, output
    report = json.loads(output)
    assert report["old_id"] == store_id and report["new_id"] != store_id
    (copied_folder,) = [Path(target) for source, target in report["copied"] if Path(source) == folder]
    assert folder_owner(copied_folder).store_id == report["new_id"]
    assert tree_digest(folder) == before  # the original's folder as it was

    status, output = run_command(["--store", str(copy), "store", "describe", "--json"])
    assert status == 0 and json.loads(output)["store_id"] == report["new_id"]
    assert json.loads(output)["copy_of"] is None
    with ExperimentStore(copy) as store:
        store.check_writable()
        assert Path(store.trial(1).checkpoint_dir).parent == copied_folder
    status, output = run_command(["--store", str(copy), "store", "detach"])
    assert status == 2 and "it is a store of its own already" in output, output


def test_store_describe_shows_the_store_its_id_and_that_it_is_a_copy(original_and_copy):
    original, copy = original_and_copy
    with ExperimentStore(original) as store:
        store_id = store.store_id
    status, output = run_command(["--store", str(copy), "store", "describe"])
    assert status == 0, output
    assert f"store:           {copy}\n" in output and f"id:              {store_id}\n" in output
    assert f"a copy of:       {original} (read-only until `det-estimator --store {copy} store detach`)" in output
    assert "note: the store" not in output  # said once, in its own line, not again as the note of other commands


def test_a_store_of_an_older_schema_is_refused_until_store_upgrade_upgrades_it_once(tmp_path):
    path = tmp_path / "old.sqlite"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        migrate(connection, str(path), MIGRATIONS[:7])  # the release before the marker
        connection.execute(
            "INSERT INTO experiments (name, state, config, context_dir, entrypoint, slots, test_mode, created_at)"
            " VALUES ('old', 'PAUSED', '{\"searcher\": {\"metric\": \"loss\"}}', '/c', 'm:T', 1, 0, 1.0)"
        )
    before = path.read_bytes()

    for command in (["experiment", "list"], ["experiment", "resume", "1"]):
        status, output = run_command(["--store", str(path), *command])
        assert status == 2, output
        assert f"The store {path} has schema version 7, older than this det-estimator's {SCHEMA_VERSION}" in output
        assert f"`det-estimator --store {path} store upgrade`" in output and "Traceback" not in output
    assert path.read_bytes() == before

    status, output = run_command(["--store", str(path), "store", "upgrade"])
    assert (status, output) == (0, f"Upgraded the store {path} from schema version 7 to {SCHEMA_VERSION}.\n")
    status, output = run_command(["--store", str(path), "store", "upgrade", "--json"])
    assert status == 0 and json.loads(output) == {
        "path": str(path),
        "from_version": SCHEMA_VERSION,
        "to_version": SCHEMA_VERSION,
        "upgraded": False,
    }
    status, output = run_command(["--store", str(path), "s", "upgrade"])
    assert status == 0 and "is at schema version 9, this det-estimator's: nothing to upgrade" in output, output
    status, output = run_command(["--store", str(path), "experiment", "list", "--json"])
    assert status == 0 and [(e["id"], e["name"], e["state"]) for e in json.loads(output)] == [(1, "old", "PAUSED")]
