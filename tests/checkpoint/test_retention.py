import math

import pytest

from det_estimator.checkpoint import TrialCheckpoints

# Validation loss by steps_completed: best (smallest) at step 2, worst (largest) at step 4.
LOSSES = {1: 0.9, 2: 0.1, 3: 0.5, 4: 1.5, 5: 0.3, 6: 0.4}


def write_trial(directory, losses):
    store = TrialCheckpoints(directory)
    for steps, loss in losses.items():
        with store.write({"steps_completed": steps}) as pending:
            (pending.path / "model.ckpt").write_text(str(steps))
        if loss is not None:
            store.record_validation(pending.checkpoint, {"loss": loss, "accuracy": 1 - loss})
    return store


def kept_steps(store):
    return [checkpoint.steps_completed for checkpoint in store.list()]


@pytest.mark.parametrize(("smaller_is_better", "best"), [(True, 2), (False, 4)])
def test_keeps_latest_and_best(tmp_path, smaller_is_better, best):
    store = write_trial(tmp_path, LOSSES)
    deleted = store.prune(save_latest=1, save_best=1, metric="loss", smaller_is_better=smaller_is_better)

    assert kept_steps(store) == [best, 6]
    assert [c.steps_completed for c in deleted] == [s for s in LOSSES if s not in (best, 6)]
    assert all(not c.path.exists() for c in deleted)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(c.uuid for c in store.list())


def test_checkpoint_both_latest_and_best_is_kept_once(tmp_path):
    store = write_trial(tmp_path, {1: 0.5, 2: 0.4, 3: 0.1})
    store.prune(save_latest=1, save_best=1, metric="loss", smaller_is_better=True)
    assert kept_steps(store) == [3]


def test_larger_counts(tmp_path):
    store = write_trial(tmp_path, LOSSES)
    store.prune(save_latest=2, save_best=2, metric="accuracy", smaller_is_better=False)
    assert kept_steps(store) == [2, 5, 6]


def test_checkpoints_without_the_metric_never_count_as_best(tmp_path):
    store = write_trial(tmp_path, {1: 0.5, 2: None, 3: math.nan, 4: None})
    store.prune(save_latest=1, save_best=2, metric="loss", smaller_is_better=True)
    assert kept_steps(store) == [1, 4]
    store.prune(save_latest=1, save_best=1, metric="missing", smaller_is_better=True)
    assert kept_steps(store) == [4]


def test_equal_values_prefer_the_more_recent(tmp_path):
    store = write_trial(tmp_path, {1: 0.2, 2: 0.2, 3: 0.9})
    store.prune(save_latest=0, save_best=1, metric="loss", smaller_is_better=True)
    assert kept_steps(store) == [2]


def test_zero_and_zero_deletes_everything(tmp_path):
    store = write_trial(tmp_path, LOSSES)
    assert len(store.prune(save_latest=0, save_best=0, metric=None, smaller_is_better=True)) == 6
    assert store.list() == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("save_latest", [3, 4, 5, 6, 100])
def test_keeping_more_than_there_are_keeps_all(tmp_path, save_latest):
    store = write_trial(tmp_path, {1: 0.5, 2: 0.4, 3: 0.1})
    assert store.prune(save_latest=save_latest, save_best=0, metric=None) == []
    assert kept_steps(store) == [1, 2, 3]


def test_nothing_to_delete(tmp_path):
    store = write_trial(tmp_path, {1: 0.5})
    assert store.prune(save_latest=1, save_best=0, metric=None) == []
    assert kept_steps(store) == [1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"save_latest": -1, "save_best": 0, "metric": None}, "`save_latest` must be an int >= 0"),
        ({"save_latest": 1, "save_best": 1.5, "metric": "loss"}, "`save_best` must be an int >= 0"),
        ({"save_latest": 1, "save_best": 1, "metric": None}, "`metric` must name the validation metric"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    store = write_trial(tmp_path, {1: 0.5, 2: 0.1})
    with pytest.raises(ValueError, match=match):
        store.prune(**kwargs)
    assert kept_steps(store) == [1, 2]
