"""``store copy``: every record of a store copied into another, SQLite to PostgreSQL and back, all or nothing."""

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from det_estimator.store import (
    Assignment,
    ExperimentStore,
    FolderOwnedError,
    LogOwner,
    MetricKind,
    NewTrial,
    SearchState,
    State,
    StoreLocation,
    folder_owner,
)
from det_estimator.store import _copy as store_copy
from det_estimator.store._tables import LOG_CHUNKS, METADATA, STORE_INFO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import run_command  # noqa: E402

TRIALS = 8
SEARCH_CONFIG = {
    "name": "search",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 8, "learning_rate": {"type": "double", "minval": 0.001, "maxval": 0.1}},
    "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_trials": TRIALS,
                 "max_length": {"batches": 20}},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints", "save_trial_latest": 1},
    "max_restarts": 5,
}  # fmt: skip
# Every table but the marker and the logs, which each store keeps its own way (files, or log_chunks).
TABLES = [table.name for table in METADATA.sorted_tables if table not in (STORE_INFO, LOG_CHUNKS)]


def fill(store: ExperimentStore, checkpoints: Path) -> None:
    """A finished search of 8 trials (NaN metrics, checkpoints kept and deleted, a restart), a paused experiment, a job.

    Recorded through the store's own write API, as a run records them; each trial's log
    and event file, and each kept checkpoint's folder, written where the store says.
    """
    search = store.create_experiment("search", SEARCH_CONFIG, "/context", "model_def:Trial", slots=1, test=False)
    created = store.apply_search_step(
        search,
        {"rng": [1, 2, 3], "pending": list(range(TRIALS))},
        checkpoints,
        creates=[NewTrial(request_id, {"learning_rate": 0.01 * (request_id + 1)}, 100 + request_id)
                 for request_id in range(TRIALS)],
        assignments=[Assignment(request_id, 20, SearchState.QUEUED) for request_id in range(TRIALS)],
    )  # fmt: skip
    for request_id, trial_id in sorted(created.items()):
        trial = store.trial(trial_id)
        store.set_search_state(trial_id, SearchState.RUNNING)
        run = store.start_run(trial_id)
        if request_id == 3:  # a failed run, restarted from its checkpoint
            store.record_run_error(run, {"rank": 1, "type": "ValueError", "message": "bad batch", "traceback": "..."})
            store.end_run(run, State.ERROR, exit_status=1)
            store.count_restart(trial_id, run, "rank 1: ValueError: bad batch")
            run = store.start_run(trial_id, start_batches=10)
        for batches in (10, 20):
            loss = math.nan if (request_id, batches) == (5, 10) else 1.0 / (request_id + batches)
            store.record_metrics(trial_id, MetricKind.TRAINING, batches, {"loss": loss}, run_id=run)
            auc = math.nan if request_id == 2 else 0.5 + request_id / 100
            store.record_metrics(trial_id, MetricKind.VALIDATION, batches, {"loss": loss, "auc": auc}, run_id=run)
            uuid = f"{trial_id:04d}-{batches:04d}-0000-0000-000000000000"
            path = Path(trial.checkpoint_dir) / uuid
            path.mkdir(parents=True)
            (path / "metadata.json").write_text("{}")
            store.record_checkpoint(trial_id, uuid, batches, str(path), 2, {"steps_completed": batches}, run_id=run)
            store.record_checkpoint_validation(uuid, {"loss": loss})
            if batches == 10:
                (path / "metadata.json").unlink()
                path.rmdir()
                store.mark_checkpoints_deleted([uuid])
        store.end_run(run, State.COMPLETED, exit_status=0)
        store.report_search_metric(trial_id, 20, 1.0 / (request_id + 20))
        store.set_trial_state(trial_id, State.COMPLETED)
        store.set_search_state(trial_id, SearchState.CLOSED)
        write_log(store, LogOwner.trial(trial_id), f"--- det-estimator: run 1 of trial {trial_id}\nloss went down\n")
        Path(trial.tensorboard_dir).mkdir(parents=True)
        (Path(trial.tensorboard_dir) / "events.out.tfevents.1").write_bytes(b"\x00event")
    store.set_state(search, State.COMPLETED)

    paused = store.create_experiment(
        "single", {**SEARCH_CONFIG, "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 20}}},
        "/context", "model_def:Trial", slots=2, test=False,
    )  # fmt: skip
    trial_id = store.create_trial(paused, {"learning_rate": 0.1}, 7, checkpoints, max_batches=20)
    run = store.start_run(trial_id)
    store.record_metrics(trial_id, MetricKind.TRAINING, 5, {"loss": 0.5}, run_id=run)
    store.request_pause(paused)
    store.acknowledge_preemption(run)
    store.end_run(run, State.PAUSED, exit_status=0)
    store.set_state(paused, State.PAUSED)

    job = store.create_job("inference", {"entrypoint_script": "infer.py"}, "/context", ["python3", "infer.py"], 2)
    write_log(store, LogOwner.job(job), "predicted 100 rows\n")
    store.end_job(job, State.COMPLETED, exit_status=0)
    for experiment in (search, paused):
        store.own_folders(experiment)


def write_log(store: ExperimentStore, owner: LogOwner, text: str) -> None:
    """Writes a trial's or job's log as a run does, through the store."""
    writer = store.log_writer(owner, pytest.fail)
    writer.write(text)
    writer.close()


def rows(location: StoreLocation) -> dict[str, list[dict[str, Any]]]:
    """Every row of every copied table, in the order of its key, read beside the store."""
    engine = sqlalchemy.create_engine(location.sqlalchemy_url())
    try:
        with engine.connect() as connection:
            return {
                table.name: [
                    dict(row)
                    for row in connection.execute(
                        sqlalchemy.select(table).order_by(*table.primary_key.columns)
                    ).mappings()
                ]
                for table in METADATA.sorted_tables
                if table.name in TABLES
            }
    finally:
        engine.dispose()


def described(location: StoreLocation, experiment_id: int) -> dict[str, Any]:
    """``experiment describe ID --json``, run through the command's main in this process."""
    status, output = run_command(
        ["--store", location.passed_on, "experiment", "describe", str(experiment_id), "--json"]
    )
    assert status == 0, output
    return json.loads(output)


def with_files_dir(value: Any, files_dir: Path) -> Any:
    """``value`` (JSON text or rows) with the store's files folder, which each store has of its own, named alike."""
    return json.loads(json.dumps(value, default=str).replace(str(files_dir), "<the store's files>"))


def copy(source: StoreLocation, destination: StoreLocation, *options: str) -> tuple[int, str]:
    return run_command(["store", "copy", source.passed_on, destination.passed_on, *options])


@pytest.fixture
def original(tmp_path) -> StoreLocation:
    """An SQLite store filled by :func:`fill`, its checkpoints under ``tmp_path/checkpoints``."""
    location = StoreLocation(path=tmp_path / "original" / "store.sqlite")
    with ExperimentStore(location) as store:
        fill(store, tmp_path / "checkpoints")
    return location


def test_sqlite_to_postgresql_and_back_keeps_every_row_and_every_experiments_description(
    original, postgres_url, tmp_path, monkeypatch
):
    # Pages of 3 rows: every table is read and written in several.
    monkeypatch.setattr(store_copy, "BATCH_ROWS", 3)
    team = StoreLocation(url=postgres_url)
    back = StoreLocation(path=tmp_path / "back" / "store.sqlite")
    (tmp_path / "back").mkdir()
    with ExperimentStore(original) as store:
        original_files, original_id = store.files_dir, store.store_id
        experiments = [experiment.id for experiment in store.experiments()]
        folders = sorted({Path(t.checkpoint_dir).parent for e in experiments for t in store.trials(e)})
    before = {experiment: described(original, experiment) for experiment in experiments}
    original_rows = rows(original)
    assert len(original_rows["trials"]) == TRIALS + 1 and original_rows["trial_restarts"]

    status, output = copy(original, team, "--json")
    assert status == 0, output
    report = json.loads(output)
    assert {entry["table"]: entry["rows"] for entry in report["tables"]} == {
        name: len(table) for name, table in original_rows.items()
    }
    assert [entry["table"] for entry in report["tables"]] == TABLES
    assert report["folders_moved"] == [str(folder) for folder in folders] and report["folders_left"] == []
    with ExperimentStore(team) as store:
        # The copied experiments' folders are the copy's now.
        assert [folder_owner(folder).store_id for folder in folders] == [store.store_id] * len(folders)
        # Its logs are in the database, where every machine reads them; its files folder has the event files alone.
        for trial in store.trials(experiments[0]):
            assert store.log_text(LogOwner.trial(trial.id)).startswith(
                f"--- det-estimator: run 1 of trial {trial.id}\n"
            )
        assert store.log_text(LogOwner.job(store.jobs()[0].id)) == "predicted 100 rows\n"
        assert not list(store.files_dir.rglob("output.log")) and list(store.files_dir.rglob("events.out.*"))
    # The 8 trials' logs and the job's into the database; the search's and the job's folders (event files).
    assert len(report["logs_copied"]) == TRIALS + 1 + 2
    status, output = copy(team, back)
    assert status == 0, output
    assert f"The experiments' checkpoint folders belong to {back.path} now" in output

    for location in (team, back):
        with ExperimentStore(location) as store:
            files, store_id = store.files_dir, store.store_id
            # A store of its own: its id and its files folder.
            assert store_id != original_id and files != original_files
        copied_rows = rows(location)
        assert {name: len(table) for name, table in copied_rows.items()} == {
            name: len(table) for name, table in original_rows.items()
        }
        assert with_files_dir(copied_rows, files) == with_files_dir(original_rows, original_files)
        for experiment in experiments:
            assert with_files_dir(described(location, experiment), files) == with_files_dir(
                before[experiment], original_files
            )

    # The round trip's store has the logs, event files and records, NaN metrics as NaN.
    with ExperimentStore(back) as store:
        for trial in store.trials(experiments[0]):
            assert Path(trial.log_path).is_relative_to(store.files_dir)
            assert f"run 1 of trial {trial.id}" in Path(trial.log_path).read_text()
            assert (Path(trial.tensorboard_dir) / "events.out.tfevents.1").read_bytes() == b"\x00event"
        (job,) = store.jobs()
        assert Path(job.log_path).read_text() == "predicted 100 rows\n"
        nan_trial = store.trials(experiments[0])[2]
        assert all(math.isnan(m.metrics["auc"]) for m in store.metrics(nan_trial.id, MetricKind.VALIDATION))
        assert [folder_owner(folder).store_id for folder in folders] == [store.store_id] * len(folders)
        # New rows take the ids after the copied ones.
        assert store.create_experiment("new", SEARCH_CONFIG, "/c", "m:T", 1, False) == max(experiments) + 1
    # The stores copied from no longer write in the folders they gave away.
    for location in (original, team):
        with ExperimentStore(location) as store, pytest.raises(FolderOwnedError, match="belongs to another"):
            store.own_folders(experiments[0])
    # `store detach` gives the original copies of its own, as the command's output says.
    status, output = run_command(["--store", str(original.path), "store", "detach", "--json"])
    assert status == 0, output
    assert sorted(Path(source) for source, _ in json.loads(output)["copied"]) == folders
    with ExperimentStore(original) as store:
        store.own_folders(experiments[0])


def test_new_rows_in_a_postgresql_copy_take_the_ids_after_the_copied_ones(original, postgres_url):
    team = StoreLocation(url=postgres_url)
    status, output = copy(original, team)
    assert status == 0, output
    copied = rows(team)
    with ExperimentStore(team) as store:
        experiment = store.create_experiment("new", SEARCH_CONFIG, "/c", "m:T", 1, False)
        trial = store.create_trial(experiment, {}, 1, "/checkpoints")
        run = store.start_run(trial)
        store.record_metrics(trial, MetricKind.TRAINING, 1, {"loss": 1.0}, run_id=run)
        store.count_restart(trial, run, "a cause")
        job = store.create_job("j", {}, "/c", ["true"], 1)
    for table, made in [("experiments", experiment), ("trials", trial), ("trial_runs", run), ("jobs", job)]:
        assert made == max(row["id"] for row in copied[table]) + 1, table
    after = rows(team)
    for table in ("metrics", "trial_restarts"):
        assert after[table][-1]["id"] == max(row["id"] for row in copied[table]) + 1, table


def test_a_destination_holding_an_experiment_is_refused_and_left_as_it_was(original, postgres_url):
    team = StoreLocation(url=postgres_url)
    with ExperimentStore(team) as store:
        store.create_experiment("theirs", SEARCH_CONFIG, "/c", "m:T", 1, False)
        store.set_state(1, State.COMPLETED)
    before = rows(team)
    status, output = copy(original, team)
    assert status == 2, output
    assert "holds 1 experiment(s) and 0 job(s)" in output and "new or empty store only" in output
    assert "Traceback" not in output
    assert rows(team) == before


def test_a_source_with_a_running_experiment_is_refused_with_nothing_recorded(tmp_path):
    source = StoreLocation(path=tmp_path / "store.sqlite")
    with ExperimentStore(source) as store:
        running = store.create_experiment("running", SEARCH_CONFIG, "/c", "m:T", 1, False)  # launched by this process
    destination = StoreLocation(path=tmp_path / "copy.sqlite")
    status, output = copy(source, destination)
    assert status == 2, output
    assert f"is in use: experiment {running} (process {os.getpid()} on" in output and "pause" in output
    assert not destination.path.exists() and not (tmp_path / "copy-files").exists()


def test_a_copy_that_fails_in_the_middle_leaves_the_destination_and_the_folders_as_they_were(
    original, postgres_url, monkeypatch
):
    team = StoreLocation(url=postgres_url)
    with ExperimentStore(team) as store:
        files, team_id = store.files_dir, store.store_id
    with ExperimentStore(original) as store:
        original_id = store.store_id
        folders = sorted({Path(t.checkpoint_dir).parent for e in store.experiments() for t in store.trials(e.id)})
    empty = rows(team)
    copied_tables = []
    copy_table = store_copy.copy_table

    def failing_after_the_first_table(read, writing, table, seen):
        if copied_tables:
            raise OSError("the disk went away")
        copied_tables.append(table.name)
        return copy_table(read, writing, table, seen)

    monkeypatch.setattr(store_copy, "copy_table", failing_after_the_first_table)
    with pytest.raises(OSError, match="the disk went away"):
        copy(original, team)
    assert copied_tables == [TABLES[0]]
    assert rows(team) == empty
    assert not (files / "experiments").exists() and not (files / "jobs").exists()
    assert [folder_owner(folder).store_id for folder in folders] == [original_id] * len(folders)

    # The same at the last step, the folders' move, which is undone too.
    monkeypatch.setattr(store_copy, "copy_table", copy_table)
    move_folders = store_copy._move_folders

    def failing_midway(folders, source, target, owners_before):
        move_folders(set(sorted(folders)[:1]), source, target, owners_before)
        raise OSError("cannot write the owner file")

    monkeypatch.setattr(store_copy, "_move_folders", failing_midway)
    with pytest.raises(OSError, match="cannot write the owner file"):
        copy(original, team)
    assert rows(team) == empty
    assert not (files / "experiments").exists() and not (files / "jobs").exists()  # the logs it had copied
    assert [folder_owner(folder).store_id for folder in folders] == [original_id] * len(folders)

    monkeypatch.setattr(store_copy, "_move_folders", move_folders)
    status, output = copy(original, team)
    assert status == 0, output
    assert [folder_owner(folder).store_id for folder in folders] == [team_id] * len(folders)


def test_the_copy_is_of_the_source_as_it_was_when_the_copy_began(original, postgres_url, monkeypatch):
    team = StoreLocation(url=postgres_url)
    before = rows(original)
    with ExperimentStore(original) as store:
        original_files = store.files_dir
    copy_table = store_copy.copy_table
    written = []

    def writing_to_the_source_meanwhile(read, writing, table, seen):
        if not written:  # after the snapshot began, before any table is read: another process records more
            with ExperimentStore(original) as store:
                experiment = store.create_experiment("later", SEARCH_CONFIG, "/c", "m:T", 1, False)
                trial = store.create_trial(experiment, {}, 1, "/checkpoints")
                store.record_metrics(trial, MetricKind.TRAINING, 1, {"loss": 1.0})
                store.set_state(experiment, State.COMPLETED)
            written.append(experiment)
        return copy_table(read, writing, table, seen)

    monkeypatch.setattr(store_copy, "copy_table", writing_to_the_source_meanwhile)
    status, output = copy(original, team)
    assert status == 0, output
    with ExperimentStore(team) as store:
        team_files = store.files_dir
    assert with_files_dir(rows(team), team_files) == with_files_dir(before, original_files)
    assert len(rows(original)["experiments"]) == len(before["experiments"]) + 1


def test_sqlite_to_sqlite_prints_the_rows_of_each_table(original, tmp_path):
    destination = StoreLocation(path=tmp_path / "copy.sqlite")
    status, output = copy(original, destination)
    assert status == 0, output
    counts = {name: len(table) for name, table in rows(original).items()}
    width = max(len(table) for table in TABLES)
    for table in TABLES:
        assert f"  {table:<{width}}  {counts[table]:>10,} rows" in output
    assert f"Copied the store {original.path} into the store {destination.path}" in output
    assert rows(destination)["metrics"] == rows(original)["metrics"]
