"""The experiment store: what it records and shows, its schema migrations, concurrent processes, the recorder."""

import contextlib
import fcntl
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from det_estimator.store import (
    SCHEMA_VERSION,
    STORE_VARIABLE,
    CheckpointRecord,
    ExperimentBusyError,
    ExperimentStore,
    MetricKind,
    State,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreRecorder,
    StoreUpgradeNeededError,
    UnknownIdError,
    default_store_path,
    to_json_value,
    trial_checkpoint_dir,
)
from det_estimator.store import _launchers as launchers_module
from det_estimator.store import _store as store_module
from det_estimator.store._launchers import LEASE_SECONDS, Launched
from det_estimator.store._schema import MIGRATIONS, migrate

ACTIVE, PAUSED, COMPLETED, ERROR, INTERRUPTED = (
    State.ACTIVE,
    State.PAUSED,
    State.COMPLETED,
    State.ERROR,
    State.INTERRUPTED,
)
TRAINING, VALIDATION = MetricKind.TRAINING, MetricKind.VALIDATION
CONFIG = {"hyperparameters": {"lr": 0.1}, "searcher": {"metric": "loss", "max_length": {"batches": 100}}}
TABLES = [
    "checkpoints",
    "experiments",
    "jobs",
    "log_chunks",
    "metrics",
    "sqlite_sequence",
    "store_info",
    "trial_restarts",
    "trial_runs",
    "trials",
]


def new_experiment(store, name="mnist", test=False, config=CONFIG):
    return store.create_experiment(name, config, "/context", "model_def:Trial", 2, test)


def raw(path):
    """A plain connection to the store's file, beside the store's own; closed at the end of a ``with``."""
    return contextlib.closing(sqlite3.connect(str(path), isolation_level=None))


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    return process.pid


def plain(records):
    """Metric records as (batches, metrics) pairs."""
    return [(record.batches, record.metrics) for record in records]


# Recording and reading back.


def test_round_trip_of_an_experiment_its_trials_metrics_and_checkpoints(tmp_path, store):
    experiment_id = new_experiment(store, test=True)
    trial_id = store.create_trial(experiment_id, {"lr": 0.1, "layers": [3, 4]}, 7, "/checkpoints")
    other_trial_id = store.create_trial(experiment_id, {"lr": 0.2, "layers": [5]}, 8, "/checkpoints", 80)
    store.set_progress(trial_id, 0, 100)
    store.set_progress(other_trial_id, 5, 80)
    for batches, loss in [(20, 0.5), (10, 0.9), (30, 0.25)]:
        store.record_metrics(trial_id, TRAINING, batches, {"loss": loss})
    store.record_metrics(trial_id, VALIDATION, 20, {"accuracy": 0.75, "names": ["a", "b"]})
    store.record_metrics(trial_id, VALIDATION, 10, {"accuracy": 0.5, "names": []})
    for uuid, batches in [("uuid-10", 10), ("uuid-20", 20), ("uuid-30", 30)]:
        store.record_checkpoint(
            trial_id, uuid, batches, f"/checkpoints/first/{uuid}", batches * 100, {"validation_metrics": {"b": batches}}
        )
    store.mark_checkpoints_deleted(["uuid-10", "uuid-20"])

    assert plain(store.metrics(trial_id, TRAINING)) == [(10, {"loss": 0.9}), (20, {"loss": 0.5}), (30, {"loss": 0.25})]
    assert plain(store.metrics(trial_id, VALIDATION)) == [
        (10, {"accuracy": 0.5, "names": []}),
        (20, {"accuracy": 0.75, "names": ["a", "b"]}),
    ]
    assert store.metrics(other_trial_id, TRAINING) == []

    [listed] = store.experiments()
    assert listed.id == experiment_id and listed.name == "mnist" and listed.state == ACTIVE
    assert listed.test is True and listed.slots == 2
    # The trials' batches add up (30 recorded + 5 of progress); max_batches is the largest.
    assert (listed.batches_trained, listed.max_batches, listed.num_trials) == (35, 100, 2)

    shown = store.experiment(experiment_id)
    assert shown.config == CONFIG
    assert shown.context_dir == "/context" and shown.entrypoint == "model_def:Trial"
    assert [trial.id for trial in store.trials(experiment_id)] == [trial_id, other_trial_id]

    assert [c.uuid for c in store.checkpoints(experiment_id)] == ["uuid-30"]
    every = store.checkpoints(experiment_id, include_deleted=True)
    assert [(c.uuid, c.trial_id, c.batches, c.state, c.validation_metrics, c.size_bytes, c.path) for c in every] == [
        (uuid, trial_id, batches, state, {"b": batches}, batches * 100, f"/checkpoints/first/{uuid}")
        for uuid, batches, state in [
            ("uuid-10", 10, "DELETED"),
            ("uuid-20", 20, "DELETED"),
            ("uuid-30", 30, "COMPLETED"),
        ]
    ]
    assert isinstance(every[0], CheckpointRecord) and store.checkpoint("uuid-20") == every[1]

    trial = store.trial(trial_id)
    assert trial == store.trials(experiment_id)[0]
    assert trial.hparams == {"lr": 0.1, "layers": [3, 4]}
    assert (trial.seed, trial.state) == (7, ACTIVE)
    assert (trial.batches_trained, trial.max_batches) == (30, 100)
    tag = Path(trial.checkpoint_dir).parent.name.removeprefix(f"experiment-{experiment_id}-")
    assert trial.checkpoint_dir == str(trial_checkpoint_dir("/checkpoints", experiment_id, tag, trial_id))
    assert store.trial(other_trial_id).checkpoint_dir == str(Path("/checkpoints") / f"experiment-1-{tag}" / "trial-2")
    trial_dir = tmp_path / "store-files" / "experiments" / str(experiment_id) / f"trial-{trial_id}"
    assert trial.log_path == str(trial_dir / "output.log")
    assert trial.tensorboard_dir == str(trial_dir / "tensorboard")
    assert store.trial_dir(experiment_id, trial_id) == trial_dir


def test_each_experiment_gets_its_own_random_checkpoint_directory(store):
    first = store.create_trial(new_experiment(store), {}, 0, "/storage")
    second = store.create_trial(new_experiment(store), {}, 0, "/storage")
    directories = {Path(store.trial(trial_id).checkpoint_dir).parent.name for trial_id in (first, second)}
    assert len(directories) == 2 and all(name.startswith("experiment-") for name in directories)


def test_two_stores_in_one_folder_keep_their_files_apart(tmp_path):
    with ExperimentStore(tmp_path / "a.sqlite") as first, ExperimentStore(tmp_path / "b.sqlite") as second:
        first_trial = first.create_trial(new_experiment(first), {}, 0, "/storage")
        second_trial = second.create_trial(new_experiment(second), {}, 0, "/storage")
        assert first_trial == second_trial == 1
        assert first.trial(1).log_path != second.trial(1).log_path
        assert Path(first.trial(1).log_path).is_relative_to(tmp_path / "a-files")
        assert Path(second.trial(1).log_path).is_relative_to(tmp_path / "b-files")


def test_reopened_store_shows_what_was_recorded(tmp_path):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = new_experiment(store)
        trial_id = store.create_trial(experiment_id, {"lr": 0.1}, 1, "/checkpoints")
        store.record_metrics(trial_id, TRAINING, 4, {"loss": 1.5})
        store.record_checkpoint(trial_id, "uuid", 4, "/checkpoints/uuid", 10, {})

    with ExperimentStore(tmp_path / "store.sqlite") as store:
        assert store.trials(experiment_id)[0].hparams == {"lr": 0.1}
        assert plain(store.metrics(trial_id, TRAINING)) == [(4, {"loss": 1.5})]
        assert [c.uuid for c in store.checkpoints(experiment_id)] == ["uuid"]


def test_metrics_at_the_same_batches_keep_the_order_they_were_recorded_in(store):
    trial_id = store.create_trial(new_experiment(store), {}, 0, "/checkpoints")
    store.record_metrics(trial_id, VALIDATION, 10, {"run": "second workload"})
    store.record_metrics(trial_id, VALIDATION, 5, {"run": "first workload"})
    store.record_metrics(trial_id, VALIDATION, 10, {"run": "after a resume"})

    assert [row.metrics["run"] for row in store.metrics(trial_id, VALIDATION)] == [
        "first workload",
        "second workload",
        "after a resume",
    ]


def test_metrics_of_one_run_and_after_a_record_can_be_read_alone(store):
    trial_id = store.create_trial(new_experiment(store), {}, 0, "/checkpoints")
    first_run, second_run = store.start_run(trial_id), store.start_run(trial_id)
    store.record_metrics(trial_id, TRAINING, 5, {"loss": 2.0}, first_run)
    store.record_metrics(trial_id, TRAINING, 10, {"loss": 1.0}, second_run)
    store.record_metrics(trial_id, TRAINING, 15, {"loss": 0.5}, second_run)

    assert plain(store.metrics(trial_id, TRAINING, run_id=second_run)) == [(10, {"loss": 1.0}), (15, {"loss": 0.5})]
    first_of_second = store.metrics(trial_id, TRAINING, run_id=second_run)[0]
    assert plain(store.metrics(trial_id, TRAINING, after_id=first_of_second.id)) == [(15, {"loss": 0.5})]


def test_batches_trained_only_grows_with_metrics_but_set_progress_sets_it(store):
    trial_id = store.create_trial(new_experiment(store), {}, 0, "/checkpoints")
    store.record_metrics(trial_id, TRAINING, 50, {"loss": 1.0})
    store.record_metrics(trial_id, VALIDATION, 40, {"loss": 1.0})
    assert store.trial(trial_id).batches_trained == 50

    store.set_progress(trial_id, 30, 60)  # a resume from the checkpoint at 30 batches
    assert (store.trial(trial_id).batches_trained, store.trial(trial_id).max_batches) == (30, 60)
    store.set_progress(trial_id, 35)  # progress without a new length keeps the length
    assert (store.trial(trial_id).batches_trained, store.trial(trial_id).max_batches) == (35, 60)


def test_experiment_without_trials_is_listed_with_no_progress(store):
    experiment_id = new_experiment(store)

    [listed] = store.experiments()
    assert listed.id == experiment_id
    assert (listed.batches_trained, listed.max_batches, listed.num_trials) == (0, None, 0)
    assert store.trials(experiment_id) == []
    assert store.checkpoints(experiment_id) == []


def test_checkpoints_are_per_experiment_and_per_trial(store):
    first, second = new_experiment(store, "first"), new_experiment(store, "second")
    first_trial = store.create_trial(first, {}, 0, "/first")
    other_trial = store.create_trial(first, {}, 1, "/first")
    second_trial = store.create_trial(second, {}, 0, "/second")
    store.record_checkpoint(first_trial, "first-uuid", 10, "/first/uuid", 1, {})
    store.record_checkpoint(other_trial, "other-uuid", 10, "/first/other", 1, {})
    store.record_checkpoint(second_trial, "second-uuid", 5, "/second/uuid", 1, {})

    assert [c.uuid for c in store.checkpoints(first)] == ["first-uuid", "other-uuid"]
    assert [c.uuid for c in store.checkpoints(first, trial_id=other_trial)] == ["other-uuid"]
    assert [c.uuid for c in store.checkpoints(second)] == ["second-uuid"]


def test_recording_a_checkpoint_again_replaces_it(store):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    store.record_checkpoint(trial_id, "uuid", 10, "/checkpoints/uuid", 100, {})
    store.mark_checkpoints_deleted(["uuid"])
    store.record_checkpoint(trial_id, "uuid", 10, "/checkpoints/uuid", 120, {"validation_metrics": {"loss": 0.5}})

    [checkpoint] = store.checkpoints(experiment_id, include_deleted=True)
    assert checkpoint.state == "COMPLETED"
    assert checkpoint.size_bytes == 120 and checkpoint.validation_metrics == {"loss": 0.5}


def test_validation_metrics_reported_after_a_checkpoint_join_its_metadata(store):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    store.record_checkpoint(trial_id, "uuid", 10, "/checkpoints/uuid", 100, {"steps_completed": 10})

    store.record_checkpoint_validation("uuid", {"loss": 0.25})
    store.record_checkpoint_validation("no-such-uuid", {"loss": 0.5})  # nothing to update: no error

    [checkpoint] = store.checkpoints(experiment_id)
    assert checkpoint.validation_metrics == {"loss": 0.25}
    assert checkpoint.metadata == {"steps_completed": 10, "validation_metrics": {"loss": 0.25}}


def test_best_validation_follows_the_searcher_metric_and_its_direction(store):
    smaller = new_experiment(store, config=CONFIG)
    larger = new_experiment(store, config={"searcher": {"metric": "auc", "smaller_is_better": False}})
    trials = {
        experiment_id: [store.create_trial(experiment_id, {}, seed, "/c") for seed in range(2)]
        for experiment_id in (smaller, larger)
    }
    assert store.best_validation(smaller) is None
    for experiment_id, metric in ((smaller, "loss"), (larger, "auc")):
        first, second = trials[experiment_id]
        store.record_metrics(first, VALIDATION, 5, {metric: 0.5, "other": 0.0})
        store.record_metrics(second, VALIDATION, 5, {metric: float("nan")})
        store.record_metrics(second, VALIDATION, 10, {metric: 0.25})
        store.record_metrics(first, VALIDATION, 15, {metric: 0.75})
        store.record_metrics(first, VALIDATION, 20, {"other": 1.0})

    best = store.best_validation(smaller)
    assert (best.metric, best.value, best.batches, best.trial_id) == ("loss", 0.25, 10, trials[smaller][1])
    best = store.best_validation(larger)
    assert (best.metric, best.value, best.batches, best.trial_id) == ("auc", 0.75, 15, trials[larger][0])


def test_the_best_validations_of_all_experiments_read_at_once_are_those_read_one_by_one(store):
    draw = random.Random(3)
    directions = [{"metric": "loss", "smaller_is_better": True}, {"metric": "auc", "smaller_is_better": False}]
    experiments = [new_experiment(store, config={"searcher": directions[number % 2]}) for number in range(6)]
    for experiment_id in experiments[:-1]:  # the last one has no validation
        for seed in range(draw.randint(1, 3)):
            trial = store.create_trial(experiment_id, {}, seed, "/c")
            run = store.start_run(trial)
            for batches in range(10, 60, 10):
                value = draw.choice([draw.random(), draw.random(), 0.5, float("nan")])
                store.record_metrics(trial, VALIDATION, batches, {"loss": value, "auc": value}, run)
            # A resume from batch 20: the first run's validations after it are rolled back.
            resumed = store.start_run(trial, start_batches=20)
            store.record_metrics(trial, VALIDATION, 30, {"loss": draw.random(), "auc": draw.random()}, resumed)

    at_once = store.best_validations(store.experiments())

    assert at_once == {experiment_id: store.best_validation(experiment_id) for experiment_id in experiments}
    assert at_once[experiments[-1]] is None and all(at_once[e] is not None for e in experiments[:-1])
    assert store.best_validations(store.experiments()[:2]).keys() == set(experiments[:2])


def test_records_as_json_have_null_for_nan_and_names_for_states(store):
    trial_id = store.create_trial(new_experiment(store), {}, 0, "/checkpoints")
    store.record_metrics(trial_id, VALIDATION, 5, {"auc": float("nan"), "loss": float("inf"), "n": 3})

    [record] = store.metrics(trial_id, VALIDATION)
    shown = json.loads(json.dumps(to_json_value([record, store.trial(trial_id)]), allow_nan=False))
    assert shown[0]["metrics"] == {"auc": None, "loss": None, "n": 3}
    assert shown[0]["kind"] == "validation" and shown[1]["state"] == "ACTIVE"


def test_unknown_ids_raise_unknown_id_error_naming_the_store(store):
    with pytest.raises(
        UnknownIdError, match=f"There is no experiment 42 in the store {re.escape(store.home)}"
    ) as raised:
        store.experiment(42)
    assert isinstance(raised.value, LookupError) and isinstance(raised.value, StoreError)
    with pytest.raises(UnknownIdError, match="There is no trial 7 in the store"):
        store.trial(7)
    with pytest.raises(UnknownIdError, match="There is no checkpoint abc in the store"):
        store.checkpoint("abc")
    with pytest.raises(UnknownIdError, match="There is no experiment 3 in the store"):
        store.create_trial(3, {}, 0, "/checkpoints")


def test_experiments_are_found_again_by_their_run_key(store):
    assert store.find_experiment("run_trial:/storage/analytic") is None
    first = store.create_experiment("a", CONFIG, "/c", "m:T", 1, False, run_key="run_trial:/storage/analytic")
    new_experiment(store)
    second = store.create_experiment("a", CONFIG, "/c", "m:T", 1, False, run_key="run_trial:/storage/analytic")

    assert store.find_experiment("run_trial:/storage/analytic").id == second != first
    store.update_experiment(second, {"searcher": {"max_length": {"batches": 200}}}, 2, True)
    found = store.experiment(second)
    assert (found.config["searcher"]["max_length"], found.slots, found.test) == ({"batches": 200}, 2, True)


# Runs, claims and pause requests.


def test_a_run_records_its_end_its_preemption_and_its_first_error(store):
    trial_id = store.create_trial(new_experiment(store), {}, 0, "/checkpoints")
    run_id = store.start_run(trial_id)
    assert store.trial_run(run_id).state == ACTIVE and store.trial_run(run_id).ended_at is None

    store.acknowledge_preemption(run_id)
    store.record_run_error(run_id, {"rank": 1, "type": "ValueError", "message": "first"})
    store.record_run_error(run_id, {"rank": 0, "type": "PeerGoneError", "message": "its consequence"})
    store.end_run(run_id, ERROR, exit_status=1)

    (run,) = store.trial_runs(trial_id)
    assert (run.state, run.preempted, run.exit_status) == (ERROR, True, 1)
    assert run.error == {"rank": 1, "type": "ValueError", "message": "first"} and run.ended_at is not None


def test_one_live_launcher_at_a_time_claims_an_experiment(store):
    experiment_id = new_experiment(store)
    store.claim(experiment_id)
    store.claim(experiment_id)  # the same process claims again: fine
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(ExperimentBusyError, match=f"being run by process {os.getpid()} on this machine"):
            store.claim(experiment_id, pid=sleeper.pid)
        store.set_launcher(experiment_id, sleeper.pid)
        with pytest.raises(ExperimentBusyError, match=f"Experiment {experiment_id} is being run by process"):
            store.claim(experiment_id)
    finally:
        sleeper.kill()
        sleeper.wait()
    store.claim(experiment_id)  # its launcher died: the claim survives crashes
    assert store.experiment(experiment_id).launcher_pid == os.getpid()


def test_a_pause_request_is_recorded_and_cleared_by_the_next_claim(store):
    experiment_id = new_experiment(store)
    assert store.experiment(experiment_id).pause_requested_at is None
    store.request_pause(experiment_id)
    assert store.experiment(experiment_id).pause_requested_at is not None
    store.claim(experiment_id)
    assert store.experiment(experiment_id).pause_requested_at is None


# States.


@pytest.mark.parametrize("final_state", [PAUSED, COMPLETED, ERROR])
def test_final_state_sets_ended_at_and_active_clears_it(store, final_state):
    experiment_id = new_experiment(store)
    trial_ids = [store.create_trial(experiment_id, {}, seed, "/checkpoints") for seed in range(2)]
    bystander = new_experiment(store, "bystander")
    bystander_trial = store.create_trial(bystander, {}, 0, "/checkpoints")
    shown = store.experiment(experiment_id)
    assert shown.state == ACTIVE and shown.ended_at is None

    store.set_state(experiment_id, final_state)
    shown = store.experiment(experiment_id)
    assert shown.state == final_state and shown.ended_at is not None
    trials = store.trials(experiment_id)
    assert [(t.id, t.state) for t in trials] == [(trial_id, final_state) for trial_id in trial_ids]
    assert all(t.ended_at is not None for t in trials)
    assert [e.state for e in store.experiments()] == [final_state, ACTIVE]
    assert store.trial(bystander_trial).state == ACTIVE and store.trial(bystander_trial).ended_at is None

    store.set_state(experiment_id, ACTIVE)  # a resume: each trial becomes ACTIVE again as its run starts
    shown = store.experiment(experiment_id)
    assert shown.state == ACTIVE and shown.ended_at is None
    store.set_trial_state(trial_ids[0], ACTIVE)
    assert [(t.state, t.ended_at is None) for t in store.trials(experiment_id)] == [
        (ACTIVE, True),
        (final_state, False),
    ]


def test_a_final_state_leaves_trials_that_ended_on_their_own_alone(store):
    experiment_id = new_experiment(store)
    done, running = (store.create_trial(experiment_id, {}, seed, "/checkpoints") for seed in range(2))
    store.set_trial_state(done, COMPLETED)
    store.set_state(experiment_id, PAUSED)
    assert [t.state for t in store.trials(experiment_id)] == [COMPLETED, PAUSED]


def test_active_experiment_whose_launcher_died_reads_as_interrupted(store, beside):
    experiment_id = new_experiment(store)
    store.set_launcher(experiment_id, dead_pid())

    assert store.experiment(experiment_id).state == INTERRUPTED
    assert [e.state for e in store.experiments()] == [INTERRUPTED]
    # Only the view changes: the record stays ACTIVE, so a resume can take it over.
    with beside(store) as connection:
        assert connection.rows("SELECT state FROM experiments") == [(ACTIVE,)]


def test_an_experiment_whose_creating_process_died_before_running_it_reads_as_interrupted(store):
    create = (
        "import sys; from det_estimator.store import ExperimentStore\n"
        "with ExperimentStore(sys.argv[1]) as store:\n"
        "    print(store.create_experiment('mnist', {}, '/context', 'model_def:Trial', 1, False))\n"
    )
    # The process records the experiment and exits before it claims it to run it.
    created = subprocess.run(
        [sys.executable, "-c", create, store.location.passed_on], capture_output=True, text=True, check=True
    )
    experiment_id = int(created.stdout)

    assert store.experiment(experiment_id).state == INTERRUPTED
    store.claim(experiment_id)  # a resume is not refused as if the creating process ran it
    assert store.experiment(experiment_id).state == ACTIVE
    assert store.experiment(new_experiment(store)).state == ACTIVE  # created by this process, which is alive


def test_a_process_that_got_a_dead_launchers_pid_does_not_keep_its_experiment_active(store, beside):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.set_launcher(experiment_id, sleeper.pid)
        run_id = store.start_run(trial_id)
        assert store.experiment(experiment_id).state == ACTIVE
        # The launcher was killed and the system gave its pid to another process, which
        # started later (pids wrap at 32768 by default).
        with beside(store) as connection:
            connection.execute("UPDATE experiments SET launcher_started = launcher_started - 1")

        assert store.experiment(experiment_id).state == INTERRUPTED
        assert store.trial(trial_id).state == INTERRUPTED
        assert store.trial_run(run_id).state == INTERRUPTED
        store.claim(experiment_id)  # a resume is not refused as if the launcher still ran it
    finally:
        sleeper.kill()
        sleeper.wait()
    assert store.experiment(experiment_id).launcher_pid == os.getpid()


def test_runs_of_a_dead_launcher_read_as_interrupted_and_end_so_when_another_claims_the_experiment(store):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    ended = store.start_run(trial_id)
    store.end_run(ended, PAUSED)
    store.record_checkpoint(trial_id, "kept", 40, "/checkpoints/kept", 10, {})
    died = store.start_run(trial_id, start_batches=40)
    store.set_progress(trial_id, 70)  # trained past the checkpoint when its launcher was killed
    store.set_launcher(experiment_id, dead_pid())
    assert [run.state for run in store.trial_runs(trial_id)] == [PAUSED, INTERRUPTED]
    assert store.trial_run(died).state == INTERRUPTED

    store.claim(experiment_id)  # a resume: this process is the launcher now
    assert [run.state for run in store.trial_runs(trial_id)] == [PAUSED, INTERRUPTED]
    assert store.trial_run(died).ended_at is not None
    assert store.trial(trial_id).batches_trained == 40  # where the resume continues
    resumed = store.start_run(trial_id, start_batches=40)
    assert store.trial_run(resumed).state == ACTIVE


def test_runs_of_a_live_launcher_read_as_active_and_a_second_claim_by_it_keeps_them(store):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    store.claim(experiment_id)
    run_id = store.start_run(trial_id)
    store.claim(experiment_id)
    assert store.trial_run(run_id).state == ACTIVE and store.trial_run(run_id).ended_at is None


def test_active_experiment_with_a_live_launcher_reads_as_active(store):
    experiment_id = new_experiment(store)
    store.set_launcher(experiment_id, os.getpid())

    shown = store.experiment(experiment_id)
    assert shown.state == ACTIVE
    assert shown.launcher_pid == os.getpid()
    assert [e.state for e in store.experiments()] == [ACTIVE]


def test_a_launcher_on_another_host_is_alive_while_it_beats_and_its_experiment_resumable_after_the_lease(store, beside):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
    run_id = store.start_run(trial_id)
    store.set_launcher(experiment_id, dead_pid())  # its heartbeat written now, and not refreshed by this process
    assert store._heartbeat.beating == frozenset()
    with beside(store) as connection:
        connection.execute("UPDATE experiments SET launcher_host = 'another-machine'")

    # Its pid means nothing here: its heartbeat, younger than the lease, keeps it alive.
    assert store.experiment(experiment_id).state == ACTIVE and store.trial_run(run_id).state == ACTIVE
    with pytest.raises(ExperimentBusyError, match="being run by process .* on another-machine"):
        store.claim(experiment_id)

    # Its machine went down a lease ago, by the database's clock: the experiment reads INTERRUPTED.
    with beside(store) as connection:
        connection.execute(f"UPDATE experiments SET launcher_seen_at = launcher_seen_at - {LEASE_SECONDS}")
    assert store.experiment(experiment_id).state == INTERRUPTED
    assert [e.state for e in store.experiments()] == [INTERRUPTED]
    assert (store.trial(trial_id).state, store.trial_run(run_id).state) == (INTERRUPTED, INTERRUPTED)

    store.claim(experiment_id)  # resumed from this machine, which beats for it from now on
    assert store.experiment(experiment_id).launcher_pid == os.getpid()
    assert store._heartbeat.beating == {Launched("experiments", experiment_id)}
    assert store.trial_run(run_id).ended_at is not None  # the dead launcher's run, ended as INTERRUPTED


def test_a_launcher_beats_from_a_thread_until_its_experiment_pauses_and_its_job_ends(store, beside, monkeypatch):
    monkeypatch.setattr(launchers_module, "HEARTBEAT_SECONDS", 0.05)
    with ExperimentStore(store.location) as launcher:
        experiment_id, job_id = new_experiment(launcher), launcher.create_job("job", {}, "/context", ["p.py"], 1)
        launched = {Launched("experiments", experiment_id), Launched("jobs", job_id)}
        assert launcher._heartbeat.beating == launched
        ids = {"experiments": experiment_id, "jobs": job_id}
        with beside(store) as connection:
            for table, id in ids.items():
                connection.execute(f"UPDATE {table} SET launcher_seen_at = 0 WHERE id = :id", {"id": id})
        # The heartbeat's thread refreshes both, by the database's clock.
        deadline = time.monotonic() + 60
        while min(seen_at(beside, store, table, id) for table, id in ids.items()) == 0:
            assert time.monotonic() < deadline, "the launcher's heartbeat was not refreshed"
            time.sleep(0.05)

        launcher.set_state(experiment_id, PAUSED)
        launcher.end_job(job_id, COMPLETED, 0)
        assert launcher._heartbeat.beating == frozenset()
        launcher.claim(experiment_id)
        assert launcher._heartbeat.beating == {Launched("experiments", experiment_id)}
        with beside(store) as connection:  # another launcher took it over: a beat leaves it alone, and stops
            connection.execute(
                "UPDATE experiments SET launcher_pid = launcher_pid + 1 WHERE id = :id", {"id": experiment_id}
            )
        assert launcher.refresh_heartbeats(launched) == {Launched("jobs", job_id)}
        deadline = time.monotonic() + 60
        while launcher._heartbeat.beating:
            assert time.monotonic() < deadline, "the launcher still beats for an experiment it no longer runs"
            time.sleep(0.05)


def seen_at(beside, store, table, id):
    with beside(store) as connection:
        ((value,),) = connection.rows(f"SELECT launcher_seen_at FROM {table} WHERE id = :id", {"id": id})
    return value


# A launcher whose code has ended, the process kept up by another thread, beats no more.
MAIN_THREAD_ENDS = textwrap.dedent(
    """
    import sys, threading, time
    from det_estimator.store import ExperimentStore, _launchers

    _launchers.HEARTBEAT_SECONDS = 0.05
    store = ExperimentStore(sys.argv[1])
    experiment_id = store.create_experiment("e", {}, "/context", "model_def:Trial", 1, False)
    print(experiment_id, flush=True)

    def outlive_main():
        deadline = time.monotonic() + 60
        while store._heartbeat.beating and time.monotonic() < deadline:
            time.sleep(0.05)
        print("stopped" if not store._heartbeat.beating else "still beating", flush=True)

    threading.Thread(target=outlive_main).start()
    """
)


@pytest.mark.timeout(120)
def test_a_process_whose_main_thread_ended_stops_beating(sqlite_store):
    result = subprocess.run(
        [sys.executable, "-c", MAIN_THREAD_ENDS, str(sqlite_store.path)], capture_output=True, text=True, timeout=100
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "stopped"]


def test_finished_experiment_with_a_dead_launcher_keeps_its_state(store):
    experiment_id = new_experiment(store)
    store.set_launcher(experiment_id, dead_pid())
    store.set_state(experiment_id, PAUSED)

    assert store.experiment(experiment_id).state == PAUSED


def test_a_job_whose_launcher_is_gone_reads_as_interrupted_and_an_ended_one_keeps_its_state(store, beside):
    jobs = [store.create_job(f"job{i}", {}, "/context", ["predict.py"], 1) for i in range(6)]
    running, killed, reused, ended, elsewhere, gone_elsewhere = jobs
    store.end_job(ended, COMPLETED, 0)
    with beside(store) as connection:
        # Two launched from another machine: one beating, one whose heartbeat stopped a lease ago.
        connection.execute(
            "UPDATE jobs SET launcher_host = 'another-machine' WHERE id IN (:elsewhere, :gone)",
            {"elsewhere": elsewhere, "gone": gone_elsewhere},
        )
        connection.execute(
            f"UPDATE jobs SET launcher_seen_at = launcher_seen_at - {LEASE_SECONDS} WHERE id = :id",
            {"id": gone_elsewhere},
        )
        connection.execute(
            "UPDATE jobs SET launcher_pid = :pid WHERE id IN (:killed, :ended)",
            {"pid": dead_pid(), "killed": killed, "ended": ended},
        )
        # The system gave the killed launcher's pid to a process that started later.
        connection.execute("UPDATE jobs SET launcher_started = launcher_started - 1 WHERE id = :id", {"id": reused})

    assert [job.state for job in store.jobs()] == [ACTIVE, INTERRUPTED, INTERRUPTED, COMPLETED, ACTIVE, INTERRUPTED]
    assert store.job(killed).state == INTERRUPTED


# The file.


def test_store_is_in_wal_mode(sqlite_store):
    store = sqlite_store
    with raw(store.path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_default_store_path_honours_the_variable_then_xdg_data_home_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv(STORE_VARIABLE, str(tmp_path / "explicit.sqlite"))
    assert default_store_path() == tmp_path / "explicit.sqlite"

    monkeypatch.setenv(STORE_VARIABLE, "~/stores/mine.sqlite")
    assert default_store_path() == tmp_path / "home" / "stores" / "mine.sqlite"

    monkeypatch.setenv(STORE_VARIABLE, "")
    assert default_store_path() == tmp_path / "data" / "det-estimator" / "store.sqlite"
    monkeypatch.delenv(STORE_VARIABLE)
    assert default_store_path() == tmp_path / "data" / "det-estimator" / "store.sqlite"

    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "det-estimator" / "store.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "det-estimator" / "store.sqlite"


def test_store_without_a_path_is_created_at_the_default_with_its_directories(monkeypatch, tmp_path):
    monkeypatch.delenv(STORE_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "not" / "yet"))

    with ExperimentStore() as store:
        new_experiment(store)
    expected = tmp_path / "not" / "yet" / "det-estimator" / "store.sqlite"
    assert store.path == expected and expected.is_file()
    with ExperimentStore(expected) as reopened:
        assert len(reopened.experiments()) == 1


def test_a_write_that_finds_the_disk_full_says_so_and_leaves_the_store_usable(sqlite_store):
    store = sqlite_store
    experiment_id = new_experiment(store)
    # The file may not grow: SQLite fails as on a full disk, and ends the transaction itself.
    connection = store._database.sqlite_connection()  # the store's own: the limit is the connection's
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count = {pages}")

    with pytest.raises(StoreFullError, match=f"The store {store.path} cannot be written: database or disk is full"):
        store.create_experiment("big", {"notes": "x" * 1_000_000}, "/context", "model_def:Trial", 1, False)

    assert not connection.in_transaction
    connection.execute("PRAGMA max_page_count = 1073741823")
    store.set_state(experiment_id, PAUSED)
    assert [record.state for record in store.experiments()] == [PAUSED]


def test_a_write_that_waited_too_long_for_another_processs_lock_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "_LOCK_WAIT_SECONDS", 0.2)
    path = tmp_path / "store.sqlite"
    with ExperimentStore(path) as store, raw(path) as other:
        experiment_id = new_experiment(store)
        other.execute("BEGIN EXCLUSIVE")  # as an sqlite3 shell left inside a transaction

        with pytest.raises(StoreLockedError, match=f"The store {path} cannot be written: database is locked"):
            store.set_state(experiment_id, PAUSED)
        # Before a command starts anything: said as such, not as a store it may not write.
        with pytest.raises(StoreError, match="another process held a write transaction open on it") as refused:
            store.check_writable()
        assert "this user can write" not in str(refused.value)

        other.execute("ROLLBACK")
        store.set_state(experiment_id, PAUSED)
        assert store.experiment(experiment_id).state == PAUSED


def test_file_that_is_not_sqlite_is_refused(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_bytes(random.Random(0).randbytes(8192))

    with pytest.raises(StoreError, match=f"Cannot use {path} as a det-estimator store"):
        ExperimentStore(path)


# Migrations.

FIRST_STEP = "CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"
SECOND_STEP = """
    ALTER TABLE things ADD COLUMN colour TEXT NOT NULL DEFAULT 'grey';
    CREATE INDEX things_by_colour ON things (colour);
"""


def user_version(connection):
    return connection.execute("PRAGMA user_version").fetchone()[0]


@pytest.fixture
def connection(tmp_path):
    with raw(tmp_path / "migrated.sqlite") as connection:
        yield connection


def test_migration_brings_an_old_store_up_to_date_keeping_its_rows(tmp_path, connection):
    path = str(tmp_path / "migrated.sqlite")
    migrate(connection, path, [FIRST_STEP])
    assert user_version(connection) == 1
    connection.executemany("INSERT INTO things (name) VALUES (?)", [("kettle",), ("lamp",)])

    migrate(connection, path, [FIRST_STEP, SECOND_STEP])
    assert user_version(connection) == 2
    assert connection.execute("SELECT name, colour FROM things ORDER BY id").fetchall() == [
        ("kettle", "grey"),
        ("lamp", "grey"),
    ]
    assert connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall() == [
        ("things_by_colour",)
    ]

    migrate(connection, path, [FIRST_STEP, SECOND_STEP])  # up to date: nothing runs twice
    assert user_version(connection) == 2


def test_failing_migration_step_leaves_the_store_at_the_previous_version(tmp_path, connection):
    path = str(tmp_path / "migrated.sqlite")
    broken = "ALTER TABLE things ADD COLUMN colour TEXT; INSERT INTO no_such_table VALUES (1)"
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        migrate(connection, path, [FIRST_STEP, broken])
    # The steps run in one transaction: the first step's table is gone with the failed second's.
    assert user_version(connection) == 0 and connection.execute("SELECT name FROM sqlite_master").fetchall() == []

    migrate(connection, path, [FIRST_STEP])
    connection.execute("INSERT INTO things (name) VALUES ('kettle')")

    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        migrate(connection, path, [FIRST_STEP, broken])
    assert user_version(connection) == 1
    assert [row[1] for row in connection.execute("PRAGMA table_info(things)")] == ["id", "name"]
    assert not connection.in_transaction

    migrate(connection, path, [FIRST_STEP, SECOND_STEP])
    assert connection.execute("SELECT name, colour FROM things").fetchall() == [("kettle", "grey")]


def test_migration_refuses_a_store_of_a_newer_schema(tmp_path, connection):
    path = str(tmp_path / "migrated.sqlite")
    connection.execute("PRAGMA user_version = 3")

    with pytest.raises(StoreError) as raised:
        migrate(connection, path, [FIRST_STEP, SECOND_STEP])
    message = str(raised.value)
    assert f"The store {path} has schema version 3" in message
    assert "reads schema versions up to 2" in message
    assert user_version(connection) == 3
    assert connection.execute("SELECT name FROM sqlite_master").fetchall() == []


def test_a_store_of_the_first_schema_is_migrated_with_its_records(tmp_path):
    path = tmp_path / "old.sqlite"
    with raw(path) as connection:
        migrate(connection, str(path), MIGRATIONS[:1])
        connection.execute(
            "INSERT INTO experiments (name, state, config, context_dir, entrypoint, slots, test_mode, created_at)"
            " VALUES ('old', 'PAUSED', '{}', '/c', 'm:T', 1, 0, 1.0)"
        )
        connection.execute(
            "INSERT INTO trials (experiment_id, state, hparams, seed, checkpoint_dir, log_path, created_at)"
            " VALUES (1, 'PAUSED', '{}', 3, '/old/checkpoints', '/old/output.log', 1.0)"
        )
        connection.execute(
            "INSERT INTO metrics (trial_id, kind, batches, metrics, recorded_at) VALUES (1, 'training', 5, '{}', 2.0)"
        )

    # Opened as every command opens it, it is refused, and left as it is, until upgraded explicitly.
    with pytest.raises(StoreUpgradeNeededError) as refused:
        ExperimentStore(path)
    assert str(refused.value).startswith(f"The store {path} has schema version 1, older than this det-estimator's 9.")
    assert f"det-estimator --store {path} store upgrade" in str(refused.value)
    with raw(path) as connection:
        assert user_version(connection) == 1

    with ExperimentStore(path, upgrade=True) as store:
        assert (store.schema.from_version, store.schema.to_version, store.schema.upgraded) == (1, SCHEMA_VERSION, True)
        assert store.experiment(1).name == "old" and store.experiment(1).state == PAUSED
        assert store.trial(1).checkpoint_dir == "/old/checkpoints" and store.trial(1).log_path == "/old/output.log"
        assert plain(store.metrics(1, TRAINING)) == [(5, {})]
        assert store.trial_runs(1) == [] and store.experiment(1).run_key is None


def test_experiment_store_refuses_a_store_of_a_newer_schema(tmp_path):
    path = tmp_path / "future.sqlite"
    ExperimentStore(path).close()
    with raw(path) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    with pytest.raises(StoreError) as raised:
        ExperimentStore(path)
    message = str(raised.value)
    assert f"The store {path} has schema version {SCHEMA_VERSION + 1}" in message
    assert f"up to {SCHEMA_VERSION}" in message


# Several processes at once.

# Touches argv[1], then waits for the lock on argv[2] that the test holds: the processes of a group
# are blocked in the same call until it lets go, so they all start at once. Each then waits a random
# fraction of a millisecond or two, so that some arrive while another is in the middle of its first step.
BARRIER = textwrap.dedent(
    """
    import fcntl, json, random, sys, time
    from pathlib import Path
    from det_estimator.store import ExperimentStore

    def barrier():
        Path(sys.argv[1]).touch()
        with open(sys.argv[2]) as gate:
            fcntl.flock(gate, fcntl.LOCK_SH)
        time.sleep(random.uniform(0, 0.002))
    """
)

OPEN_SCRIPT = BARRIER + textwrap.dedent(
    """
    barrier()
    with ExperimentStore(sys.argv[3]) as store:
        print(store.create_experiment(sys.argv[4], {}, "/context", "model_def:Trial", 1, False))
    """
)

WRITE_SCRIPT = BARRIER + textwrap.dedent(
    """
    name = sys.argv[4]
    with ExperimentStore(sys.argv[3]) as store:
        experiment_id = store.create_experiment(name, {"owner": name}, "/context", "model_def:Trial", 1, False)
        trial_id = store.create_trial(experiment_id, {"owner": name}, 0, "/checkpoints/" + name, 300)
        barrier()
        for batches in range(1, 301):
            store.record_metrics(trial_id, "training", batches, {"owner": name, "loss": 1.0 / batches})
            if batches % 15 == 0:
                store.record_checkpoint(
                    trial_id, f"{name}-{batches}", batches, f"/checkpoints/{name}/{batches}", batches, {"owner": name}
                )
    print(json.dumps({"experiment": experiment_id, "trial": trial_id}))
    """
)


def run_together(tmp_path, script, groups, timeout=60):
    """Runs the script once per (store path, name) of each group, the processes of a group released together.

    Every process is started first, and blocks at the barrier; then the groups are released one
    after the other, each once the previous one has finished. Returns the outputs, in order.
    """
    gates, processes = [], []
    try:
        for group_index, group in enumerate(groups):
            gate = open(tmp_path / f"gate-{group_index}", "w")  # noqa: SIM115 -- held across the whole run
            gates.append(gate)
            fcntl.flock(gate, fcntl.LOCK_EX)
            for store_path, name in group:
                ready = tmp_path / f"ready-{len(processes)}"
                command = [sys.executable, "-c", script, str(ready), gate.name, str(store_path), name]
                process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                processes.append((ready, process))
        deadline = time.monotonic() + timeout
        while not all(ready.exists() for ready, _ in processes):
            exited = [process for _, process in processes if process.poll() is not None]
            if exited or time.monotonic() > deadline:
                pytest.fail(f"a process did not reach the barrier: {[p.communicate()[1] for p in exited]}")
            time.sleep(0.01)
        results, started = [], 0
        for gate, group in zip(gates, groups):
            fcntl.flock(gate, fcntl.LOCK_UN)
            for _, process in processes[started : started + len(group)]:
                stdout, stderr = process.communicate(timeout=timeout)
                results.append((process.returncode, stdout, stderr))
            started += len(group)
    finally:
        for gate in gates:
            gate.close()
        for _, process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    failures = [stderr for returncode, _, stderr in results if returncode != 0]
    assert not failures, f"{len(failures)} of {len(results)} processes failed; the first:\n{failures[0]}"
    return [stdout for _, stdout, _ in results]


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path):
    # Several new stores, each opened by three processes at the same moment, for more chances of a race.
    paths = [tmp_path / f"store-{index}" / "store.sqlite" for index in range(6)]
    names = [f"process-{index}" for index in range(3)]

    run_together(tmp_path, OPEN_SCRIPT, [[(path, name) for name in names] for path in paths])

    for path in paths:
        with raw(path) as connection:
            assert user_version(connection) == SCHEMA_VERSION
            assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            assert [name for (name,) in tables] == TABLES
        with ExperimentStore(path) as store:
            assert sorted(e.name for e in store.experiments()) == names


def test_opening_a_new_store_waits_for_a_process_that_holds_its_write_lock(tmp_path):
    # What a process that turns a brand-new file into a WAL store holds for a moment, as a second
    # process opens the same store: a write lock on a file still in rollback-journal mode. The
    # second must wait its turn (as every write waits for the others), not fail.
    path = tmp_path / "store.sqlite"
    holder = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE placeholder (x)")
    release = threading.Timer(0.5, holder.execute, ["ROLLBACK"])
    release.start()
    try:
        with ExperimentStore(path) as store:
            assert store.experiments() == []
    finally:
        release.join()
        holder.close()
    with raw(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert user_version(connection) == SCHEMA_VERSION


def test_processes_writing_at_once_lose_nothing(tmp_path, store_location, beside):
    # Two processes each create an experiment and write its records at once, on either database.
    given = store_location.path or store_location.url
    ExperimentStore(store_location).close()

    outputs = run_together(tmp_path, WRITE_SCRIPT, [[(given, "left"), (given, "right")]])

    ids = dict(zip(["left", "right"], (json.loads(output) for output in outputs)))
    if store_location.is_sqlite:
        with raw(store_location.path) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with ExperimentStore(store_location) as store:
        with beside(store) as connection:
            assert connection.rows("SELECT COUNT(*) FROM metrics") == [(600,)]
            assert connection.rows("SELECT COUNT(*) FROM checkpoints") == [(40,)]
        assert sorted(e.name for e in store.experiments()) == ["left", "right"]
        for name, recorded in ids.items():
            assert plain(store.metrics(recorded["trial"], TRAINING)) == [
                (batches, {"owner": name, "loss": 1.0 / batches}) for batches in range(1, 301)
            ]
            checkpoints = store.checkpoints(recorded["experiment"])
            assert [c.uuid for c in checkpoints] == [f"{name}-{batches}" for batches in range(15, 301, 15)]
            assert {c.trial_id for c in checkpoints} == {recorded["trial"]}
            assert store.experiment(recorded["experiment"]).config == {"owner": name}
            assert store.trial(recorded["trial"]).batches_trained == 300


# The recorder.


@pytest.fixture
def recorded_trial(store):
    experiment_id = new_experiment(store)
    trial_id = store.create_trial(experiment_id, {"lr": 0.1}, 0, "/checkpoints")
    return experiment_id, trial_id


def scalars(directory, tag):
    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def served_scalars(directory, tag):
    """The points the TensorBoard server shows: its accumulator takes a run's first session start for no restart."""
    accumulator = plugin_event_accumulator.EventAccumulator(str(directory), tensor_size_guidance={tag: 0})
    accumulator.Reload()
    return [(event.step, float(tensor_util.make_ndarray(event.tensor_proto))) for event in accumulator.Tensors(tag)]


def scalar_tags(directory):
    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return sorted(accumulator.Tags()["scalars"])


def test_recorder_records_progress_and_metrics_of_its_run_in_the_store(store, recorded_trial):
    _, trial_id = recorded_trial
    run_id = store.start_run(trial_id)
    recorder = StoreRecorder(store, trial_id, run_id)

    recorder.on_start(20, 200)
    assert (store.trial(trial_id).batches_trained, store.trial(trial_id).max_batches) == (20, 200)
    recorder.on_progress(25)
    assert (store.trial(trial_id).batches_trained, store.trial(trial_id).max_batches) == (25, 200)

    recorder.on_training(30, {"loss": 0.5, "note": "warm", "flag": True})
    recorder.on_training(40, {"loss": 0.25})
    recorder.on_validation(40, {"accuracy": 0.75, "per_class": [0.5, 1.0]})

    assert plain(store.metrics(trial_id, TRAINING)) == [
        (30, {"loss": 0.5, "note": "warm", "flag": True}),
        (40, {"loss": 0.25}),
    ]
    assert plain(store.metrics(trial_id, VALIDATION, run_id=run_id)) == [
        (40, {"accuracy": 0.75, "per_class": [0.5, 1.0]})
    ]
    assert store.trial(trial_id).batches_trained == 40
    recorder.close()


def test_recorder_writes_numeric_metrics_to_tensorboard_event_files(store, recorded_trial):
    _, trial_id = recorded_trial
    recorder = StoreRecorder(store, trial_id)

    recorder.on_training(10, {"loss": 0.5, "learning_rate": 2, "note": "x", "flag": True, "sizes": [1, 2]})
    recorder.on_training(20, {"loss": 0.25, "learning_rate": 1})
    recorder.on_validation(20, {"accuracy": 0.75, "per_class": [0.5, 1.0], "best": False})
    recorder.on_validation(30, {"comment": "nothing numeric"})
    recorder.on_validation(40, {"accuracy": 0.875})

    tensorboard_dir = Path(store.trial(trial_id).tensorboard_dir)
    assert sorted(path.name for path in tensorboard_dir.iterdir() if path.is_dir()) == ["training", "validation"]
    assert scalar_tags(tensorboard_dir / "training") == ["learning_rate", "loss"]
    assert scalars(tensorboard_dir / "training", "loss") == [(10, 0.5), (20, 0.25)]
    assert scalars(tensorboard_dir / "training", "learning_rate") == [(10, 2.0), (20, 1.0)]
    assert scalar_tags(tensorboard_dir / "validation") == ["accuracy"]
    assert scalars(tensorboard_dir / "validation", "accuracy") == [(20, 0.75), (40, 0.875)]


def test_recorder_writes_the_trials_hyperparameters_for_tensorboards_hparams_dashboard(store):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import metadata

    experiment_id = new_experiment(store)
    hparams = {"lr": 0.1, "optimizer": {"name": "<b>adam</b>", "nesterov": True}, "units": 32}
    trial_id = store.create_trial(experiment_id, hparams, 0, "/checkpoints")
    recorder = StoreRecorder(store, trial_id)
    recorder.on_validation(20, {"accuracy": 0.75})
    recorder.close()

    # Read back with TensorBoard's own reader: the session start in the trial's folder, its metrics beneath.
    tensorboard_dir = Path(store.trial(trial_id).tensorboard_dir)
    (event_file,) = tensorboard_dir.glob("events.out.tfevents.*")
    starts = [
        metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
        for event in EventFileLoader(str(event_file)).Load()
        for value in event.summary.value
        if value.tag == metadata.SESSION_START_INFO_TAG
        and value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME
    ]
    assert len(starts) == 1
    shown = {name: getattr(value, value.WhichOneof("kind")) for name, value in starts[0].hparams.items()}
    assert shown == {"lr": 0.1, "optimizer.name": "<b>adam</b>", "optimizer.nesterov": True, "units": 32.0}
    assert scalars(tensorboard_dir / "validation", "accuracy") == [(20, 0.75)]


def test_metrics_a_later_run_trained_again_from_a_checkpoint_are_shown_once_from_that_run(store, recorded_trial):
    _, trial_id = recorded_trial
    killed = StoreRecorder(store, trial_id, store.start_run(trial_id))
    for batches, loss in ((10, 0.5), (20, 0.25), (30, 0.0625)):
        killed.on_training(batches, {"loss": loss})
        killed.on_validation(batches, {"loss": loss})
    killed.close()  # killed after 30 batches; its latest checkpoint was after 20
    restarted = StoreRecorder(store, trial_id, store.start_run(trial_id, start_batches=20))
    restarted.on_training(30, {"loss": 0.125})
    restarted.on_validation(30, {"loss": 0.125})
    restarted.close()

    expected = [(10, {"loss": 0.5}), (20, {"loss": 0.25}), (30, {"loss": 0.125})]
    assert plain(store.metrics(trial_id, TRAINING)) == plain(store.metrics(trial_id, VALIDATION)) == expected
    best = store.best_validation(store.trial(trial_id).experiment_id)
    assert (best.value, best.batches) == (0.125, 30)  # not the 0.0625 of a model no checkpoint kept
    tensorboard_dir = Path(store.trial(trial_id).tensorboard_dir)
    for kind in ("training", "validation"):
        assert scalars(tensorboard_dir / kind, "loss") == [(10, 0.5), (20, 0.25), (30, 0.125)]
        assert served_scalars(tensorboard_dir / kind, "loss") == [(10, 0.5), (20, 0.25), (30, 0.125)]


def test_recorder_creates_no_event_file_for_metrics_with_nothing_numeric(store, recorded_trial):
    _, trial_id = recorded_trial
    recorder = StoreRecorder(store, trial_id)

    recorder.on_validation(10, {"comment": "text", "done": True})

    assert plain(store.metrics(trial_id, VALIDATION)) == [(10, {"comment": "text", "done": True})]
    assert not Path(store.trial(trial_id).tensorboard_dir).exists()


def test_recorder_records_checkpoints_with_their_size_and_lean_metadata(tmp_path, store, recorded_trial, beside):
    experiment_id, trial_id = recorded_trial
    checkpoint = tmp_path / "checkpoints" / "uuid-1"
    (checkpoint / "model").mkdir(parents=True)
    (checkpoint / "model" / "model.ckpt-10.index").write_bytes(b"i" * 1000)
    (checkpoint / "metadata.json").write_bytes(b"m" * 234)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"o" * 5000)
    (checkpoint / "link.bin").symlink_to(outside)  # a link's target is not part of the checkpoint
    metadata = {
        "steps_completed": 10,
        "validation_metrics": {"loss": 0.5},
        "hparams": {"lr": 0.1},
        "rng_states": {"python": [1, 2, 3]},
        "config": {"searcher": {}},
        "files": {"model/model.ckpt-10.index": {"size": 1000}},
    }
    recorder = StoreRecorder(store, trial_id)

    recorder.on_checkpoint("uuid-1", 10, str(checkpoint), metadata)
    recorder.on_checkpoint("uuid-2", 20, str(checkpoint), {"steps_completed": 20})

    [first, second] = store.checkpoints(experiment_id)
    assert (first.uuid, first.trial_id, first.batches, first.state) == ("uuid-1", trial_id, 10, "COMPLETED")
    assert (first.validation_metrics, first.size_bytes, first.path) == ({"loss": 0.5}, 1234, str(checkpoint))
    assert second.uuid == "uuid-2" and second.validation_metrics is None
    with beside(store) as connection:
        [(stored,)] = connection.rows("SELECT metadata FROM checkpoints WHERE uuid = 'uuid-1'")
    assert json.loads(stored) == {"steps_completed": 10, "validation_metrics": {"loss": 0.5}, "hparams": {"lr": 0.1}}
    assert "rng_states" in metadata  # the caller's dictionary is left alone

    recorder.on_checkpoints_deleted(["uuid-1"])
    assert [c.uuid for c in store.checkpoints(experiment_id)] == ["uuid-2"]
    assert [(c.uuid, c.state) for c in store.checkpoints(experiment_id, include_deleted=True)] == [
        ("uuid-1", "DELETED"),
        ("uuid-2", "COMPLETED"),
    ]


def test_recorder_for_an_unknown_trial_raises_unknown_id_error(store):
    with pytest.raises(UnknownIdError):
        StoreRecorder(store, 99)


def test_experiment_metrics_reads_every_trials_metrics_at_once_leaving_out_those_trained_again(store):
    experiment_id = new_experiment(store)
    first = store.create_trial(experiment_id, {"lr": 0.1}, 0, "/checkpoints")
    second = store.create_trial(experiment_id, {"lr": 0.2}, 0, "/checkpoints")
    killed = store.start_run(first)
    for batches in (10, 20, 30):
        store.record_metrics(first, VALIDATION, batches, {"loss": batches / 100}, killed)
    restarted = store.start_run(first, start_batches=20)
    store.record_metrics(first, VALIDATION, 30, {"loss": 0.125}, restarted)
    store.record_metrics(second, VALIDATION, 10, {"loss": 1.0})
    store.record_metrics(second, TRAINING, 10, {"loss": 2.0})

    records = store.experiment_metrics(experiment_id, VALIDATION)
    assert [(r.trial_id, r.batches, r.metrics["loss"]) for r in records] == [
        (first, 10, 0.1),
        (first, 20, 0.2),
        (first, 30, 0.125),
        (second, 10, 1.0),
    ]
    assert records == store.metrics(first, VALIDATION) + store.metrics(second, VALIDATION)
    assert [r.metrics for r in store.experiment_metrics(experiment_id, TRAINING)] == [{"loss": 2.0}]


def test_a_store_of_schema_8_gets_metric_ids_of_its_own_equal_to_their_rowids(tmp_path):
    path = tmp_path / "eight.sqlite"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        migrate(connection, str(path), MIGRATIONS[:8])
        connection.execute(
            "INSERT INTO experiments (name, state, config, context_dir, entrypoint, slots, test_mode, created_at)"
            " VALUES ('old', 'PAUSED', '{}', '/c', 'm:T', 1, 0, 1.0)"
        )
        connection.execute(
            "INSERT INTO trials (experiment_id, state, hparams, seed, checkpoint_dir, log_path, created_at)"
            " VALUES (1, 'PAUSED', '{}', 0, '/c', '/l', 1.0)"
        )
        # Rowids with a gap, as a follower that read up to one of them would have seen them.
        for rowid, batches in [(3, 10), (7, 20), (8, 30)]:
            connection.execute(
                "INSERT INTO metrics (rowid, trial_id, kind, batches, metrics, recorded_at)"
                f" VALUES ({rowid}, 1, 'training', {batches}, '{{\"loss\": {batches}}}', 1.0)"
            )

    with ExperimentStore(path, upgrade=True) as store:
        assert [(m.id, m.batches) for m in store.metrics(1, "training")] == [(3, 10), (7, 20), (8, 30)]
        assert [m.id for m in store.metrics(1, "training", after_id=3)] == [7, 8]
        store.record_metrics(1, "training", 40, {"loss": 40})
        assert store.metrics(1, "training")[-1].id == 9
    with raw(path) as connection:
        assert user_version(connection) == SCHEMA_VERSION == 9
        assert connection.execute("SELECT files_dir FROM store_info").fetchall() == [(None,)]
