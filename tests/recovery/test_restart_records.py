"""The store's record of automatic restarts, and the migration that adds it to an older store."""

import sqlite3

from det_estimator.store import ExperimentStore, RestartRecord
from det_estimator.store._schema import MIGRATIONS, SCHEMA_VERSION, migrate


def new_trial(store: ExperimentStore) -> int:
    experiment_id = store.create_experiment("e", {"searcher": {"name": "single"}}, "/context", "m:T", 1, False)
    return store.create_trial(experiment_id, {}, 0, "/checkpoints")


def test_each_restart_is_counted_with_the_run_that_failed_and_its_cause(tmp_path):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        trial_id = new_trial(store)
        first = store.start_run(trial_id)
        assert store.count_restart(trial_id, first, "rank 1: RuntimeError: boom") == 1
        second = store.start_run(trial_id, 10)
        assert store.count_restart(trial_id, second, "rank 0: the process exited with status 137") == 2
        assert store.trial(trial_id).restarts == 2
        restarts = store.restarts(trial_id)
        assert [(r.number, r.failed_run_id, r.cause) for r in restarts] == [
            (1, first, "rank 1: RuntimeError: boom"),
            (2, second, "rank 0: the process exited with status 137"),
        ]
        assert all(isinstance(r, RestartRecord) and r.trial_id == trial_id for r in restarts)
        assert store.restarts(new_trial(store)) == []


def test_a_store_of_the_previous_schema_gains_the_restart_records_and_keeps_its_own(tmp_path):
    path = tmp_path / "old.sqlite"
    connection = sqlite3.connect(str(path), isolation_level=None)
    migrate(connection, str(path), MIGRATIONS[: SCHEMA_VERSION - 1])
    connection.execute(
        "INSERT INTO experiments (name, state, config, context_dir, entrypoint, slots, test_mode, created_at)"
        " VALUES ('old', 'COMPLETED', '{}', '/c', 'm:T', 1, 0, 0)"
    )
    connection.execute(
        "INSERT INTO trials (experiment_id, state, hparams, seed, checkpoint_dir, log_path, created_at, restarts)"
        " VALUES (1, 'COMPLETED', '{}', 0, '/k', '/l', 0, 3)"
    )
    connection.close()
    with ExperimentStore(path, upgrade=True) as store:
        assert store.experiment(1).name == "old"
        assert store.trial(1).restarts == 3  # counted before causes were recorded
        assert store.restarts(1) == []
        run = store.start_run(1)
        assert store.count_restart(1, run, "rank 0: ValueError: x") == 4
        assert [r.cause for r in store.restarts(1)] == ["rank 0: ValueError: x"]
