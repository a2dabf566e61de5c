"""A PostgreSQL store whose server goes away: waited out for a bounded time, and no write done twice."""

import contextlib
import threading
from dataclasses import dataclass

import psycopg
import pytest
import sqlalchemy

from det_estimator.store import ExperimentStore, MetricKind, StoreUnavailableError, _database

PASSWORD = "det-test-secret"  # tests/support/postgres.py's


@dataclass
class Run:
    """A run of a trial in a PostgreSQL store."""

    store: ExperimentStore
    trial_id: int
    run_id: int

    def validate(self, batches: int) -> None:
        self.store.record_metrics(self.trial_id, MetricKind.VALIDATION, batches, {"loss": 1.0 / batches}, self.run_id)

    def validations(self) -> list[int]:
        return [record.batches for record in self.store.metrics(self.trial_id, MetricKind.VALIDATION)]


@pytest.fixture
def run(postgres_server, postgres_url):
    """A run of a trial, on a server that is running again when the test ends."""
    store = ExperimentStore(postgres_url)
    experiment_id = store.create_experiment("faults", {}, "/context", "model_def:Trial", 1, False)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    yield Run(store, trial_id, store.start_run(trial_id))
    store.close()
    with contextlib.suppress(RuntimeError):  # running already: pg_ctl refuses to start it twice
        postgres_server.start()


@pytest.mark.timeout(120)
def test_a_write_waits_for_a_restarted_server_and_one_that_stays_away_is_a_clear_error(
    run, postgres_server, monkeypatch
):
    run.validate(5)

    postgres_server.kill()
    monkeypatch.setattr(_database, "RECONNECT_SECONDS", 0.5)
    with pytest.raises(StoreUnavailableError) as away:
        run.validate(10)
    said = str(away.value)
    assert said.startswith(f"Lost the connection to the store {run.store.location}: ")
    assert "it has not answered for 1 s, as long as the store waits for its database server" in said
    assert PASSWORD not in said

    monkeypatch.setattr(_database, "RECONNECT_SECONDS", 60.0)
    postgres_server.start()
    run.validate(10)  # the pool's connections died with the server: this one is new
    postgres_server.kill()
    # Started while the store waits; the write and the read are each done once.
    back = threading.Timer(1.0, postgres_server.start)
    back.start()
    try:
        run.validate(15)
        assert run.validations() == [5, 10, 15]
    finally:
        back.join()


@pytest.mark.parametrize("lost", ["before the server committed", "after the server committed"])
def test_a_write_whose_commit_answer_is_lost_is_redone_only_if_the_server_did_not_commit_it(
    run, postgres_server, postgres_url, lost
):
    database = postgres_url.rsplit("/", 1)[1]
    engine = run.store._database.engine
    once = []

    def cut(connection, cursor, statement, *args):
        """Ends the connection's server process at the first COMMIT: the client sees only a lost connection."""
        if statement != "COMMIT" or once:
            return
        once.append(statement)
        pid = connection.connection.dbapi_connection.info.backend_pid
        postgres_server.sql(database, f"SELECT pg_terminate_backend({pid}, 10000)")
        if lost == "after the server committed":
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    event = "before_cursor_execute" if lost == "before the server committed" else "after_cursor_execute"
    sqlalchemy.event.listen(engine, event, cut)
    try:
        run.validate(5)
    finally:
        sqlalchemy.event.remove(engine, event, cut)

    assert once == ["COMMIT"]
    assert run.validations() == [5]
    recorded = postgres_server.sql(database, "SELECT count(*) FROM metrics WHERE kind = 'validation'")
    assert recorded.strip() == "1"
