"""The run lifecycle: a run begins with its info, records its error with a kind, and ends in the state its end says."""

import sys

import pytest

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.config import Length, LengthUnit, load_experiment_config
from det_estimator.errors import InvalidHP, PermanentTrialError
from det_estimator.lifecycle import Ending, ErrorKind, RunError, RunLifecycle, run_state
from det_estimator.store import BATCH_INFERENCE, State


def make_config(tmp_path, **checkpoint_storage):
    return load_experiment_config(
        {
            "name": "lifecycle",
            "entrypoint": "model_def:Trial",
            "hyperparameters": {"global_batch_size": 4, "lr": {"type": "double", "minval": 0.1, "maxval": 0.2}},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 20}},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(tmp_path / "checkpoints"),
                **checkpoint_storage,
            },
            "reproducibility": {"experiment_seed": 5},
            "data": {"rows": 8},
        }
    )


def record(store, tmp_path, config=None):
    """Records an experiment of one trial, as orchestration does; returns their ids."""
    config = config or make_config(tmp_path)
    experiment_id = store.create_experiment("lifecycle", config.to_dict(), str(tmp_path), config.entrypoint, 2, True)
    trial_id = store.create_trial(experiment_id, {"global_batch_size": 4, "lr": 0.15}, 5, tmp_path / "checkpoints")
    return experiment_id, trial_id


def checkpoint(store, trial_id, batches, loss):
    trial = store.trial(trial_id)
    metadata = {"steps_completed": batches, "validation_metrics": {"loss": loss}}
    with TrialCheckpoints(trial.checkpoint_dir).write(metadata) as pending:
        (pending.path / "weights").write_text(str(batches))
    store.record_checkpoint(trial_id, pending.uuid, batches, str(pending.checkpoint.path), 1, metadata)
    return pending.uuid


@pytest.mark.parametrize(
    ("ending", "preempted", "state"),
    [
        (Ending(), False, State.COMPLETED),
        (Ending(), True, State.PAUSED),
        (Ending(error=ValueError("no")), True, State.ERROR),
        (Ending(error=KeyboardInterrupt()), False, State.ERROR),
        (Ending(error=InvalidHP("too wide")), False, State.COMPLETED),
        (Ending(error=SystemExit(0)), True, State.PAUSED),  # sys.exit(0) after should_preempt()
        (Ending(error=SystemExit()), False, State.COMPLETED),
        (Ending(error=SystemExit(3)), False, State.ERROR),
        (Ending(exit_status=0), False, State.COMPLETED),
        (Ending(exit_status=0), True, State.PAUSED),
        (Ending(exit_status=137), True, State.ERROR),
        (Ending(exit_status=-9, stopped=True), False, State.PAUSED),  # ended by its launcher, as a pause
    ],
)
def test_a_runs_state_follows_from_how_it_ended(ending, preempted, state):
    assert run_state(ending, preempted) == state


def test_begin_records_a_run_from_the_latest_valid_checkpoint_and_returns_its_info(store, tmp_path):
    experiment_id, trial_id = record(store, tmp_path)
    checkpoint(store, trial_id, 5, 0.5)
    latest = checkpoint(store, trial_id, 10, 0.25)

    info = RunLifecycle(store).begin(experiment_id, trial_id, pause_file="/tmp/pause", slots=1, search_driven=True)

    run = store.trial_run(info.trial.run_id)
    assert (run.trial_id, run.state, run.start_batches) == (trial_id, State.ACTIVE, 10)
    assert info.latest_checkpoint == latest and info.trial.hparams == {"global_batch_size": 4, "lr": 0.15}
    assert (info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed) == (trial_id, experiment_id, 5)
    assert info.trial.config == store.experiment(experiment_id).config and info.user_data == {"rows": 8}
    assert (info.store_path, info.checkpoint_dir) == (str(store.path), store.trial(trial_id).checkpoint_dir)
    assert (info.test_mode, info.pause_file, info.slots, info.search_driven) == (True, "/tmp/pause", 1, True)
    assert (info.trial_class.module, info.trial_class.qualname) == ("model_def", "Trial")


def test_a_run_that_owns_its_experiment_claims_it_and_ends_it(store, tmp_path):
    experiment_id, trial_id = record(store, tmp_path, make_config(tmp_path, save_trial_latest=0, save_trial_best=0))
    store.set_state(experiment_id, State.PAUSED)
    lifecycle = RunLifecycle(store)

    info = lifecycle.begin(experiment_id, trial_id, owns_experiment=True)
    assert store.experiment(experiment_id).state == State.ACTIVE
    assert store.experiment(experiment_id).launcher_pid is not None
    checkpoint(store, trial_id, 20, 0.25)
    state = lifecycle.end(info, Ending())
    deleted = lifecycle.end_experiment(experiment_id, state)

    assert state == store.trial_run(info.trial.run_id).state == store.experiment(experiment_id).state
    assert state == State.COMPLETED and len(deleted) == 1  # retention: nothing is kept once it completed
    assert store.checkpoints(experiment_id) == []


def test_an_experiments_launcher_claims_it_and_learns_how_it_ended_before(store, tmp_path):
    experiment_id, _ = record(store, tmp_path)
    store.set_state(experiment_id, State.ERROR)

    assert RunLifecycle(store).begin_experiment(experiment_id) == State.ERROR  # a retry of a failed search

    assert store.experiment(experiment_id).state == State.ACTIVE


def test_a_run_that_did_not_complete_leaves_its_trials_progress_at_its_latest_checkpoint(store, tmp_path):
    experiment_id, trial_id = record(store, tmp_path)
    lifecycle = RunLifecycle(store)
    info = lifecycle.begin(experiment_id, trial_id)
    checkpoint(store, trial_id, 10, 0.5)
    store.set_progress(trial_id, 14)

    assert lifecycle.end(info, Ending(exit_status=1)) == State.ERROR

    assert store.trial(trial_id).batches_trained == 10
    run = store.trial_run(info.trial.run_id)
    assert (run.state, run.exit_status) == (State.ERROR, 1) and store.trial(trial_id).state == State.ERROR
    assert lifecycle.end_experiment(experiment_id, State.ERROR) == []
    assert [c.batches for c in store.checkpoints(experiment_id)] == [10]  # a failed experiment keeps its checkpoints


def test_a_run_that_failed_after_training_all_its_batches_keeps_them(store, tmp_path):
    experiment_id, trial_id = record(store, tmp_path)
    lifecycle = RunLifecycle(store)
    info = lifecycle.begin(experiment_id, trial_id)
    store.set_progress(trial_id, 0, 4)
    store.set_progress(trial_id, 4)  # all of its length, and no checkpoint: it raised once trained

    assert lifecycle.end(info, Ending(exit_status=1)) == State.ERROR

    trial = store.trial(trial_id)
    assert (trial.state, trial.batches_trained, trial.max_batches) == (State.ERROR, 4, 4)


def test_a_paused_run_is_recorded_paused_when_its_chief_acknowledged_the_pause(store, tmp_path):
    experiment_id, trial_id = record(store, tmp_path)
    lifecycle = RunLifecycle(store)
    info = lifecycle.begin(experiment_id, trial_id)
    store.acknowledge_preemption(info.trial.run_id)

    assert lifecycle.end(info, Ending(error=SystemExit(0))) == State.PAUSED
    assert store.trial(trial_id).state == State.PAUSED


def test_a_script_run_by_hand_is_a_new_experiment_of_one_trial_owned_by_this_process(store, tmp_path):
    config = load_experiment_config({**make_config(tmp_path).to_dict(), "entrypoint": "python3 train.py"})

    info = RunLifecycle(store).begin_by_hand(config, command=["python3", "train.py"], slots=2, context_dir="/code")

    experiment = store.experiment(info.trial.experiment_id)
    assert (experiment.state, experiment.command, experiment.context_dir) == (
        State.ACTIVE,
        ["python3", "train.py"],
        "/code",
    )
    assert experiment.launcher_pid is not None and experiment.slots == info.slots == 2
    assert info.trial.hparams == config.sample_hyperparameters(5) and info.trial.trial_seed == 5
    assert info.trial_class is None and info.latest_checkpoint is None
    assert store.trial_run(info.trial.run_id).state == State.ACTIVE


def test_errors_are_recorded_with_their_kind_and_read_back(store, tmp_path):
    experiment_id, trial_id = record(store, tmp_path)
    lifecycle = RunLifecycle(store)
    run_ids = [lifecycle.begin(experiment_id, trial_id).trial.run_id for _ in range(3)]
    try:
        raise PermanentTrialError("the config does not fit")
    except PermanentTrialError as error:
        raised = RunError.of(error, 1)

    lifecycle.record_error(run_ids[0], raised)
    lifecycle.record_error(run_ids[0], RunError(ErrorKind.EXITED, "a later consequence"))  # the first one wins
    lifecycle.record_error(run_ids[1], RunError.of(InvalidHP("too wide"), 0))
    for exit_ in (SystemExit(0), SystemExit(3), KeyboardInterrupt()):  # how it was told to end, not an error
        lifecycle.record_error(run_ids[2], RunError.of(exit_, 0))

    first = store.trial_run(run_ids[0]).error
    assert (first["kind"], first["type"], first["rank"], first["permanent"]) == (
        "raised",
        "PermanentTrialError",
        1,
        True,
    )
    assert RunError.from_record(first) == raised
    assert RunError.from_record(store.trial_run(run_ids[1]).error).kind == ErrorKind.INVALID_HP
    assert store.trial_run(run_ids[2]).error is None


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        ({"rank": 0, "type": "InvalidHP", "message": "m", "traceback": ""}, ErrorKind.INVALID_HP),
        ({"rank": 1, "type": "ValueError", "message": "m", "traceback": "..."}, ErrorKind.RAISED),
        (
            {"rank": None, "type": None, "message": "the process exited with status 3", "traceback": ""},
            ErrorKind.EXITED,
        ),
    ],
)
def test_a_record_written_before_kinds_gets_the_likeliest_kind(record, kind):
    assert RunError.from_record(record).kind == kind


def test_a_job_begins_with_its_info_and_ends_failed_unless_its_processes_exited_0_by_themselves(store, tmp_path):
    lifecycle = RunLifecycle(store)
    ended = {}
    for name, ending in (
        ("ok", Ending(exit_status=0)),
        ("failed", Ending(exit_status=1)),
        ("interrupted", Ending(exit_status=-15, stopped=True)),
    ):
        job_id, info = lifecycle.begin_job(
            name, {"data": {"n": 1}}, str(tmp_path), [sys.executable, "x.py"], 2, {"n": 1}
        )
        assert (info.task_type, info.trial, info.user_data, info.slots) == (BATCH_INFERENCE, None, {"n": 1}, 2)
        assert info.store_path == str(store.path) and store.job(job_id).state == State.ACTIVE
        ended[name] = lifecycle.end_job(job_id, ending, RunError(ErrorKind.EXITED, f"{name} ended"))

    assert ended == {"ok": State.COMPLETED, "failed": State.ERROR, "interrupted": State.ERROR}
    jobs = {job.name: job for job in store.jobs()}
    assert jobs["ok"].error is None and jobs["failed"].error["message"] == "failed ended"
    assert (jobs["interrupted"].exit_status, jobs["interrupted"].state) == (-15, State.ERROR)


def test_a_run_by_hand_s_amended_config_is_what_its_resume_reads(store, tmp_path):
    config = make_config(tmp_path)
    experiment_id, _ = record(store, tmp_path, config)
    longer = config.with_overrides(max_length=Length(LengthUnit.BATCHES, 80))

    RunLifecycle(store).amend_config(experiment_id, longer)

    experiment = store.experiment(experiment_id)
    assert load_experiment_config(experiment.config).searcher.max_length.value == 80
    assert (experiment.slots, experiment.test) == (2, True)  # as recorded: only the config changes
