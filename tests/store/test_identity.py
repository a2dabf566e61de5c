"""A store knows whose it is: its marker, its id, the folders it owns, and a copy made a store of its own."""

import contextlib
import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.config import load_experiment_config
from det_estimator.lifecycle import RunLifecycle, remove_leftovers, resume_point
from det_estimator.store import (
    SCHEMA_VERSION,
    STORE_VARIABLE,
    ExperimentStore,
    FolderOwnedError,
    NothingToDetachError,
    State,
    StoreCopyError,
    StoreUnusableError,
    folder_owner,
)
from det_estimator.store._schema import MIGRATIONS, migrate


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> SHA-256 of its bytes): what a store must leave as it is."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def foreign_database(path: Path, journal_mode: str = "delete") -> Path:
    """An SQLite database another application made, as a browser's history is."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA journal_mode = {journal_mode}")
        connection.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        connection.execute("INSERT INTO moz_places (url) VALUES ('https://example.org')")
        connection.commit()
    return path


# The marker.


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_another_applications_database_is_refused_and_left_byte_for_byte(tmp_path, journal_mode):
    path = foreign_database(tmp_path / "places.sqlite", journal_mode)
    before = tree_digest(tmp_path)

    with pytest.raises(StoreUnusableError) as raised:
        ExperimentStore(path)

    assert "is an SQLite database that det-estimator did not make (its tables: moz_places)" in str(raised.value)
    assert tree_digest(tmp_path) == before  # no byte changed, no -wal, -shm or -files made beside it


@pytest.mark.parametrize(
    "made",
    [
        "CREATE TABLE store_info (id INTEGER PRIMARY KEY, application TEXT, store_id TEXT)",  # of another app
        "CREATE TABLE store_info (x TEXT)",  # of that name, other columns
        "PRAGMA application_id = 1",  # no table, but another application's id in the header
        "PRAGMA user_version = 3",  # a schema version, without the tables of ours
    ],
)
def test_a_database_that_only_looks_like_a_store_is_refused(tmp_path, made):
    path = tmp_path / "other.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(made)
        if "store_info (id" in made:
            connection.execute("INSERT INTO store_info VALUES (1, 'another-app', 'x')")
        connection.commit()
    before = path.read_bytes()

    with pytest.raises(StoreUnusableError, match="that det-estimator did not make"):
        ExperimentStore(path)
    assert path.read_bytes() == before


def test_a_new_store_is_marked_with_our_name_its_schema_version_and_an_id_of_its_own(tmp_path):
    with ExperimentStore(tmp_path / "a.sqlite") as first, ExperimentStore(tmp_path / "b.sqlite") as second:
        assert first.store_id != second.store_id and len(first.store_id) == 32
    with contextlib.closing(sqlite3.connect(tmp_path / "a.sqlite")) as connection:
        row = connection.execute("SELECT application, schema_version, store_id, home FROM store_info").fetchone()
        application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    assert row == ("det-estimator", SCHEMA_VERSION, first.store_id, str(tmp_path / "a.sqlite"))
    assert application_id.to_bytes(4, "big") == b"detE"


def test_a_store_of_the_release_before_the_marker_opens_and_gets_it(tmp_path):
    path = tmp_path / "old.sqlite"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        migrate(connection, str(path), MIGRATIONS[:7])
        connection.execute(
            "INSERT INTO experiments (name, state, config, context_dir, entrypoint, slots, test_mode, created_at)"
            " VALUES ('old', 'PAUSED', '{}', '/c', 'm:T', 1, 0, 1.0)"
        )

    with ExperimentStore(path, upgrade=True) as store:
        assert store.experiment(1).name == "old" and store.copy_of is None
        store_id = store.store_id
    with ExperimentStore(path) as store:
        assert store.store_id == store_id  # made once, by the upgrade


def test_an_empty_database_is_a_new_store(tmp_path):
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).execute("VACUUM")  # a database file with nothing in it

    with ExperimentStore(path) as store:
        assert store.experiments() == []


# Folders, copies and detach: an experiment of one trial with two checkpoints, paused.

CONFIG = {
    "name": "identity",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"global_batch_size": 4},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 8}},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 1},
}


def write_checkpoint(store, trial_id: int, batches: int) -> str:
    """What a run does at a checkpoint: its files in the trial's folder, then its record."""
    trial = store.trial(trial_id)
    metadata = {"steps_completed": batches, "validation_metrics": {"loss": 1.0 / batches}}
    with TrialCheckpoints(trial.checkpoint_dir).write(metadata) as pending:
        (pending.path / "weights").write_text(f"{store.path.name} after {batches}")
    store.record_checkpoint(trial_id, pending.checkpoint.uuid, batches, str(pending.checkpoint.path), 1, metadata)
    return pending.checkpoint.uuid


def run_once(store, experiment_id: int, trial_id: int, batches: int) -> str:
    """A run of the trial in this process: begins from its latest checkpoint, writes one, completes with retention."""
    lifecycle = RunLifecycle(store)
    lifecycle.begin(experiment_id, trial_id, owns_experiment=True)
    uuid = write_checkpoint(store, trial_id, batches)
    lifecycle.end_experiment(experiment_id, State.COMPLETED)
    return uuid


@pytest.fixture
def original(tmp_path) -> ExperimentStore:
    """A store with experiment 1 of trial 1, two checkpoints (after 2 and 4 batches), paused."""
    path = tmp_path / "original.sqlite"
    config = load_experiment_config({**CONFIG, "checkpoint_storage": {**CONFIG["checkpoint_storage"]}})
    storage = tmp_path / "checkpoints"
    with ExperimentStore(path) as store:
        experiment_id = store.create_experiment(
            "identity", config.to_dict(), str(tmp_path), "python3 train.py", 1, False, command=["python3", "train.py"]
        )
        trial_id = store.create_trial(experiment_id, {"global_batch_size": 4}, 1, storage)
        RunLifecycle(store).begin(experiment_id, trial_id, owns_experiment=True)
        write_checkpoint(store, trial_id, 2)
        write_checkpoint(store, trial_id, 4)
        store.set_state(experiment_id, State.PAUSED)
    opened = ExperimentStore(path)
    yield opened
    opened.close()


def listed_on_disk(store) -> bool:
    return all(Path(checkpoint.path).is_dir() for checkpoint in store.checkpoints(1))


def test_every_folder_a_store_writes_in_records_it_as_the_owner(original):
    (trial,) = original.trials(1)
    for folder in (Path(trial.checkpoint_dir).parent, original.files_dir):
        owner = folder_owner(folder)
        assert owner is not None and (owner.store_id, owner.store_path) == (original.store_id, str(original.path))


def test_a_copy_of_a_store_is_read_only_and_leaves_the_originals_folders_as_they_are(original, tmp_path):
    copy_path = tmp_path / "copy.sqlite"
    shutil.copy(original.path, copy_path)
    storage = tmp_path / "checkpoints"
    (trial,) = original.trials(1)
    (Path(trial.checkpoint_dir) / ".partial-0123").mkdir()  # what a killed write left, for the sweep
    before = tree_digest(storage)

    with ExperimentStore(copy_path) as copy:
        assert copy.copy_of == original.path and copy.store_id == original.store_id
        for write in (
            lambda: copy.check_writable(),
            lambda: RunLifecycle(copy).begin(1, 1, owns_experiment=True),
            lambda: RunLifecycle(copy).end_experiment(1, State.COMPLETED),
            lambda: copy.own_folders(1, make=False),
        ):
            with pytest.raises(StoreCopyError) as raised:
                write()
            assert f"The store {copy_path} is a copy of the store {original.path}" in str(raised.value)
            assert f"det-estimator --store {copy_path} store detach" in str(raised.value)
        assert remove_leftovers(copy, copy.experiments(), copy.all_trials()) == []
        assert copy.experiment(1).state == State.PAUSED and len(copy.checkpoints(1)) == 2

    assert tree_digest(storage) == before
    assert (Path(trial.checkpoint_dir) / ".partial-0123").is_dir()


def test_a_store_moved_elsewhere_takes_its_new_place_as_its_home(original, tmp_path):
    original.close()
    moved = tmp_path / "moved.sqlite"
    original.path.rename(moved)

    with ExperimentStore(moved) as store:
        assert store.copy_of is None
        store.check_writable()
        assert store.store_id == folder_owner(store.files_dir.with_name("original-files")).store_id


def test_a_store_that_meets_a_folder_of_another_store_neither_writes_nor_deletes_there(original, tmp_path):
    (trial,) = original.trials(1)
    folder = Path(trial.checkpoint_dir).parent
    other = ExperimentStore(tmp_path / "other.sqlite")
    (folder / ".det-estimator-store").write_text(
        f'{{"store_id": "{other.store_id}", "store_path": "{other.path}"}}\n', encoding="utf-8"
    )
    before = tree_digest(folder)

    with pytest.raises(FolderOwnedError) as raised:
        RunLifecycle(original).begin(1, 1, owns_experiment=True)
    said = str(raised.value)
    assert f"The folder {folder} belongs to another det-estimator store, {other.path} (store {other.store_id})" in said
    assert f"the store {original.path} (store {original.store_id}) neither writes nor deletes there" in said
    with pytest.raises(FolderOwnedError):
        RunLifecycle(original).end_experiment(1, State.COMPLETED)
    assert remove_leftovers(original, original.experiments(), original.all_trials()) == []
    assert tree_digest(folder) == before
    other.close()


def test_a_store_whose_files_folder_belongs_to_another_store_records_no_experiment(store, tmp_path):
    other = ExperimentStore(tmp_path / "other.sqlite")
    store.files_dir.mkdir(parents=True, exist_ok=True)
    (store.files_dir / ".det-estimator-store").write_text(
        f'{{"store_id": "{other.store_id}", "store_path": "{other.path}"}}\n', encoding="utf-8"
    )

    with pytest.raises(FolderOwnedError, match="belongs to another det-estimator store"):
        store.create_experiment("refused", {}, str(tmp_path), "python3 train.py", 1, False)

    assert store.experiments() == []
    other.close()


def test_a_store_made_anew_at_the_path_of_a_deleted_one_takes_over_its_files_folder(original):
    path = original.path
    original.close()
    path.unlink()
    for leftover in path.parent.glob(f"{path.name}-*"):
        leftover.unlink()

    with ExperimentStore(path) as store:
        store.own_folders(None)
        assert folder_owner(store.files_dir).store_id == store.store_id


def test_after_detach_the_copy_and_the_original_resume_independently_with_every_listed_checkpoint_on_disk(
    original, tmp_path
):
    copy_path = tmp_path / "copy.sqlite"
    shutil.copy(original.path, copy_path)
    (log := Path(original.trial(1).log_path)).parent.mkdir(parents=True, exist_ok=True)
    log.write_text("the original's run\n")

    with ExperimentStore(copy_path) as copy:
        report = copy.detach()
        assert report.old_id == original.store_id and report.new_id == copy.store_id != original.store_id
        assert copy.copy_of is None
        copied_trial = copy.trial(1)
        assert Path(copied_trial.checkpoint_dir).parent != Path(original.trial(1).checkpoint_dir).parent
        assert Path(copied_trial.log_path).read_text() == "the original's run\n"
        assert Path(copied_trial.log_path).is_relative_to(copy.files_dir)
        assert listed_on_disk(copy) and len(copy.checkpoints(1)) == 2
        assert resume_point(copy, copied_trial).steps_completed == 4

        # Each resumes from its own latest checkpoint, and its retention deletes only in its own folder.
        copy_uuid = run_once(copy, 1, 1, 6)
        original_uuid = run_once(original, 1, 1, 8)

        for store, latest in ((copy, copy_uuid), (original, original_uuid)):
            assert listed_on_disk(store)
            assert [checkpoint.uuid for checkpoint in store.checkpoints(1)][-1] == latest
            on_disk = {c.uuid for c in TrialCheckpoints(store.trial(1).checkpoint_dir).list()}
            assert {checkpoint.uuid for checkpoint in store.checkpoints(1)} == on_disk
        assert (Path(copy.checkpoint(copy_uuid).path) / "weights").read_text() == "copy.sqlite after 6"
        assert folder_owner(Path(copied_trial.checkpoint_dir).parent).store_id == copy.store_id

    with ExperimentStore(copy_path) as copy:  # opened again: a store of its own, not a copy
        assert copy.copy_of is None and copy.store_id == report.new_id


def test_detach_records_as_deleted_the_checkpoints_the_original_deleted_since_the_copy(original, tmp_path):
    copy_path = tmp_path / "copy.sqlite"
    shutil.copy(original.path, copy_path)
    run_once(original, 1, 1, 6)  # its retention keeps only the checkpoint after 6 batches

    with ExperimentStore(copy_path) as copy:
        report = copy.detach()
        assert len(report.checkpoints_gone) == 2 and copy.checkpoints(1) == []
        assert resume_point(copy, copy.trial(1)) is None


def test_detach_of_a_store_of_its_own_is_refused_and_changes_nothing(original):
    store_id, before = original.store_id, tree_digest(original.path.parent / "checkpoints")
    with pytest.raises(NothingToDetachError, match="it is a store of its own already"):
        original.detach()
    assert original.store_id == store_id and tree_digest(original.path.parent / "checkpoints") == before


def test_what_the_original_runs_reads_as_interrupted_in_its_detached_copy(original, tmp_path):
    # The original's experiment runs, launched by another live process (a sleep here).
    launcher = subprocess.Popen(["sleep", "60"])
    try:
        original.set_launcher(1, launcher.pid)
        original.set_state(1, State.ACTIVE)
        copy_path = tmp_path / "copy.sqlite"
        with contextlib.closing(sqlite3.connect(original.path)) as connection:  # into the file that cp copies
            connection.execute("PRAGMA wal_checkpoint(FULL)")
        shutil.copy(original.path, copy_path)
        detach = f"from det_estimator.store import ExperimentStore; ExperimentStore({str(copy_path)!r}).detach()"
        subprocess.run([sys.executable, "-c", detach], check=True, timeout=120)

        with ExperimentStore(copy_path) as copy:
            assert copy.experiment(1).state == State.INTERRUPTED  # the detaching process has ended
        assert original.experiment(1).state == State.ACTIVE and original.experiment(1).launcher_pid == launcher.pid
    finally:
        launcher.kill()
        launcher.wait()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://bob:s3cret@db.example:3306/team",
        "postgres://db/team",
        "sqlite:///runs/store.sqlite",
        "postgresql:/db/x",
    ],
)
def test_a_database_url_of_another_scheme_is_refused_without_a_folder_made_or_its_password_shown(
    tmp_path, monkeypatch, url
):
    monkeypatch.chdir(tmp_path)
    for given, variable in ((url, None), (None, url)):
        if variable is None:
            monkeypatch.delenv(STORE_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(STORE_VARIABLE, variable)
        with pytest.raises(StoreUnusableError, match="is a database URL") as refused:
            ExperimentStore(given)
        assert "s3cret" not in str(refused.value)
        # It names the two forms a store is given in.
        assert "path of an SQLite file" in str(refused.value) and "postgresql://" in str(refused.value)
    # Read as a path, the URL would have made a folder "postgresql:" (or "sqlite:") here.
    assert list(tmp_path.iterdir()) == []
