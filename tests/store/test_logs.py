"""Output logs through the store: files beside SQLite, rows of PostgreSQL, batched and never raising."""

import threading
import time

import pytest
import sqlalchemy

from det_estimator.store import ExperimentStore, LogOwner
from det_estimator.store import _logs as logs

CONFIG = {"searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}}


def wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the log never reached the store"
        time.sleep(0.1)


def new_trial(store: ExperimentStore) -> int:
    experiment_id = store.create_experiment("logged", CONFIG, "/context", "model_def:Trial", 1, False)
    return store.create_trial(experiment_id, {}, 0, "/checkpoints")


def test_a_log_is_written_in_batches_and_read_whole_from_its_end_and_from_an_offset(store, beside):
    trial = LogOwner.trial(new_trial(store))
    job = LogOwner.job(store.create_job("inference", {}, "/context", ["python3", "infer.py"], 1))
    assert not store.has_log(trial) and store.log_text(trial) == ""
    assert store.read_log(trial).missing == "it has printed nothing yet"
    lost: list[str] = []

    writer = store.log_writer(trial, lost.append)
    for line in range(1000):
        writer.write(f"line {line} \x00 of trial {trial.id}\n")
    writer.close()
    job_writer = store.log_writer(job, lost.append)
    job_writer.write("predicted 100 rows\n")
    job_writer.close()

    expected = "".join(f"line {line} \ufffd of trial {trial.id}\n" for line in range(1000))
    assert lost == [] and writer.intact
    # A NUL, which PostgreSQL's text cannot hold, reads as U+FFFD there (a file keeps it).
    assert store.has_log(trial) and store.log_text(trial).replace("\x00", "\ufffd") == expected
    assert store.log_text(job) == "predicted 100 rows\n"
    with beside(store) as database:
        chunks = database.rows("SELECT trial_id, job_id FROM log_chunks")
    if store.location.is_sqlite:
        assert chunks == []  # files beside the store, for tail -f
        assert store.log_location(trial) == store.trial(trial.id).log_path
    else:
        # A thousand lines written at once: a few INSERTs, not one a line.
        assert 1 <= len([chunk for chunk in chunks if chunk[0] == trial.id]) <= 3
        assert [chunk for chunk in chunks if chunk[1] == job.id] == [(None, job.id)]
        assert store.log_location(trial) == f"in the store {store.location}"

    # The web page: the end of the log, then only what came since.
    tail = store.read_log(trial)
    assert expected.endswith(tail.text.replace("\x00", "\ufffd")) and not tail.skipped and tail.missing == ""
    more = store.log_writer(trial, lost.append)
    more.write("one more line\n")
    more.close()
    assert store.read_log(trial, tail.offset).text == "one more line\n"
    assert store.read_log(trial, store.read_log(trial).offset).text == ""


def test_a_long_log_shows_its_end_on_the_page_saying_that_it_left_the_start_out(store):
    trial = LogOwner.trial(new_trial(store))
    writer = store.log_writer(trial, print)
    for line in range(30):
        writer.write(f"{line:04d}" + "x" * 9_995 + "\n")  # 300,000 characters, in several chunks
    writer.close()

    tail = store.read_log(trial)

    assert tail.skipped and len(tail.text) == logs.TAIL_CHARACTERS and tail.text.endswith("0029" + "x" * 9_995 + "\n")


@pytest.mark.timeout(120)
def test_a_postgresql_log_survives_the_server_s_restart_says_so_once_and_keeps_what_is_unwritten_bounded(
    postgres_server, postgres_url, monkeypatch
):
    monkeypatch.setattr(logs, "UNWRITTEN_LIMIT_CHARACTERS", 2_000)
    monkeypatch.setattr(logs, "CLOSE_WAIT_SECONDS", 60.0)
    with ExperimentStore(postgres_url) as store:
        trial = LogOwner.trial(new_trial(store))
        lost: list[str] = []
        said = threading.Event()
        writer = store.log_writer(trial, lambda message: (lost.append(message), said.set()))
        writer.write("before the restart\n")
        wait_for(lambda: store.has_log(trial))
        # The tests' server commits without waiting for its WAL: written out before the crash, it stays.
        postgres_server.sql(sqlalchemy.make_url(postgres_url).database, "CHECKPOINT")
        postgres_server.kill()
        try:
            # Written while the server is down: write() returns at once, whatever the database does.
            for line in range(100):
                writer.write(f"while it was down {line:02d}\n")  # 21 characters each: the limit keeps 95
            assert said.is_set()
        finally:
            postgres_server.start()
        wait_for(lambda: "while it was down 94" in store.log_text(trial))
        writer.write("after the restart\n")
        writer.close()

        assert len(lost) == 1 and f"The trial's log in the store {store.location} cannot be written" in lost[0]
        assert "Training goes on." in lost[0] and "det-test-secret" not in lost[0]
        text = store.log_text(trial)
        assert text.startswith("before the restart\nwhile it was down 00\n")
        assert "while it was down 94\n--- det-estimator: 105 characters of output left out" in text
        assert text.endswith("after the restart\n") and not writer.intact
