"""What a completed experiment keeps of its checkpoints: ``checkpoint_storage``'s policy, applied once at its end."""

import pytest

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.config import load_experiment_config
from det_estimator.lifecycle import RunLifecycle
from det_estimator.store import State

# Per trial, (batches, validation loss) of each checkpoint, oldest first. Trial "a"'s best
# is neither its first nor its latest; trial "b" holds the experiment's best.
LOSSES = {"a": [(2, 0.3), (4, 0.1), (6, 0.4)], "b": [(2, 0.05), (4, 0.2)]}


def completed_experiment(store, tmp_path, save_trial_latest, save_trial_best, save_experiment_best):
    """Records an experiment of two trials, writes their checkpoints; returns its id and {(trial, batches): uuid}."""
    config = load_experiment_config(
        {
            "name": "retention",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"global_batch_size": 4},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 6}},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(tmp_path / "checkpoints"),
                "save_trial_latest": save_trial_latest,
                "save_trial_best": save_trial_best,
                "save_experiment_best": save_experiment_best,
            },
        }
    )
    experiment_id = store.create_experiment("retention", config.to_dict(), str(tmp_path), config.entrypoint, 1, False)
    uuids = {}
    for name, checkpoints in LOSSES.items():
        trial = store.trial(store.create_trial(experiment_id, {"global_batch_size": 4}, 1, tmp_path / "checkpoints"))
        for batches, loss in checkpoints:
            metadata = {"steps_completed": batches, "validation_metrics": {"loss": loss}}
            with TrialCheckpoints(trial.checkpoint_dir).write(metadata) as pending:
                (pending.path / "weights").write_text(name)
            checkpoint = pending.checkpoint
            store.record_checkpoint(trial.id, checkpoint.uuid, batches, str(checkpoint.path), 1, metadata)
            uuids[name, batches] = checkpoint.uuid
    return experiment_id, uuids


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        ((1, 1, 0), {("a", 4), ("a", 6), ("b", 2), ("b", 4)}),
        ((0, 1, 0), {("a", 4), ("b", 2)}),
        ((1, 0, 0), {("a", 6), ("b", 4)}),
        ((0, 0, 1), {("b", 2)}),
        ((0, 0, 2), {("b", 2), ("a", 4)}),
        ((0, 0, 0), set()),
    ],
)
def test_a_completed_experiment_keeps_what_its_policy_says_over_all_trials(store, tmp_path, policy, kept):
    experiment_id, uuids = completed_experiment(store, tmp_path, *policy)

    deleted = RunLifecycle(store).end_experiment(experiment_id, State.COMPLETED)

    assert set(deleted) == {uuid for key, uuid in uuids.items() if key not in kept}
    on_disk = {c.uuid for trial in store.trials(experiment_id) for c in TrialCheckpoints(trial.checkpoint_dir).list()}
    assert on_disk == {uuids[key] for key in kept}
    assert {c.uuid for c in store.checkpoints(experiment_id)} == on_disk
    assert {c.uuid for c in store.checkpoints(experiment_id, include_deleted=True) if c.state == "DELETED"} == set(
        deleted
    )


def test_a_trial_that_never_wrote_a_checkpoint_is_passed_over(store, tmp_path):
    experiment_id, uuids = completed_experiment(store, tmp_path, 1, 0, 0)
    store.create_trial(experiment_id, {"global_batch_size": 4}, 1, tmp_path / "checkpoints")
    assert set(RunLifecycle(store).end_experiment(experiment_id, State.COMPLETED)) == {
        uuids[key] for key in [("a", 2), ("a", 4), ("b", 2)]
    }
