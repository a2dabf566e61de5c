"""Where a new run of a trial resumes from, when checkpoints the store records are no longer on disk."""

import logging
import shutil
from pathlib import Path

import pytest

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.config import load_experiment_config
from det_estimator.lifecycle import resume_point


@pytest.fixture
def trial_with_checkpoints(store, tmp_path):
    """A store with one trial and its checkpoints after 5, 10 and 15 batches; yields the store, trial and uuids."""
    config = load_experiment_config(
        {
            "name": "resume",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 20}},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        }
    )
    with store:
        experiment_id = store.create_experiment("resume", config.to_dict(), str(tmp_path), config.entrypoint, 1, False)
        trial = store.trial(store.create_trial(experiment_id, {}, 1, tmp_path / "checkpoints"))
        uuids = {}
        for batches in (5, 10, 15):
            with TrialCheckpoints(trial.checkpoint_dir).write({"steps_completed": batches}) as pending:
                (pending.path / "weights").write_text(str(batches))
            checkpoint = pending.checkpoint
            store.record_checkpoint(trial.id, checkpoint.uuid, batches, str(checkpoint.path), 1, {})
            uuids[batches] = checkpoint.uuid
        yield store, trial, uuids


def delete(trial, uuid):
    shutil.rmtree(f"{trial.checkpoint_dir}/{uuid}")


def test_a_latest_checkpoint_deleted_by_hand_is_named_with_the_one_resumed_from_instead(trial_with_checkpoints, caplog):
    store, trial, uuids = trial_with_checkpoints
    delete(trial, uuids[15])

    with caplog.at_level(logging.WARNING, logger="det_estimator.lifecycle"):
        latest = resume_point(store, trial)

    assert latest.uuid == uuids[10]
    (warning,) = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert f"The latest checkpoint of trial {trial.id}, {uuids[15]} after 15 batches, is gone: " in warning
    assert f"{trial.checkpoint_dir}/{uuids[15]} no longer exists." in warning
    assert f"Trial {trial.id} resumes from checkpoint {uuids[10]} after 10 batches instead" in warning
    # The store no longer offers it: checkpoint list and retention see what is on disk.
    assert [c.uuid for c in store.checkpoints(trial.experiment_id)] == [uuids[5], uuids[10]]
    assert store.checkpoint(uuids[15]).state == "DELETED"

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="det_estimator.lifecycle"):
        assert resume_point(store, trial).uuid == uuids[10]
    assert not caplog.records  # said once


def test_every_checkpoint_deleted_by_hand_says_the_trial_starts_again_from_batch_0(trial_with_checkpoints, caplog):
    store, trial, uuids = trial_with_checkpoints
    for uuid in uuids.values():
        delete(trial, uuid)

    with caplog.at_level(logging.WARNING, logger="det_estimator.lifecycle"):
        assert resume_point(store, trial) is None

    (warning,) = [record.getMessage() for record in caplog.records]
    assert f"{uuids[15]} after 15 batches and {uuids[10]} after 10 batches and {uuids[5]} after 5 batches" in warning
    assert f"Trial {trial.id} starts again from batch 0 instead: no earlier checkpoint of it is left." in warning
    assert store.checkpoints(trial.experiment_id) == []


def test_an_older_checkpoint_deleted_by_hand_changes_nothing_the_run_resumes_from(trial_with_checkpoints, caplog):
    store, trial, uuids = trial_with_checkpoints
    delete(trial, uuids[5])

    with caplog.at_level(logging.WARNING, logger="det_estimator.lifecycle"):
        assert resume_point(store, trial).uuid == uuids[15]

    assert not caplog.records
    assert [c.uuid for c in store.checkpoints(trial.experiment_id)] == [uuids[10], uuids[15]]


@pytest.mark.parametrize(("state", "removed"), [("ACTIVE", False), ("PAUSED", True), ("ERROR", True)])
def test_leftovers_of_killed_checkpoint_writes_go_unless_the_experiment_runs(trial_with_checkpoints, state, removed):
    from det_estimator.lifecycle import remove_leftovers
    from det_estimator.store import State

    store, trial, uuids = trial_with_checkpoints
    directory = trial.checkpoint_dir
    left = [Path(directory) / ".partial-abc", Path(directory) / f".deleting-{uuids[5]}-0123"]
    for path in left:
        (path / "model").mkdir(parents=True)
    store.set_state(trial.experiment_id, State(state))

    remove_leftovers(store, [store.experiment(trial.experiment_id)], store.trials(trial.experiment_id))

    assert [path.exists() for path in left] == [not removed] * 2
    assert sorted(checkpoint.uuid for checkpoint in TrialCheckpoints(directory).list()) == sorted(uuids.values())
