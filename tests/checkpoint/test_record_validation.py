import json

import pytest

from det_estimator.checkpoint import TrialCheckpoints, read_checkpoint


@pytest.fixture
def store(tmp_path):
    return TrialCheckpoints(tmp_path)


@pytest.fixture
def checkpoint(store):
    with store.write({"steps_completed": 10, "seed": 3}) as pending:
        (pending.path / "model").mkdir()
        (pending.path / "model" / "model.ckpt-10.index").write_bytes(b"index")
    return pending.checkpoint


def test_persists_and_survives_reload(store, checkpoint):
    updated = store.record_validation(checkpoint, {"loss": 0.25, "auc": 0.75, "per_class": [0.5, 1.0]})

    assert updated == checkpoint
    assert updated.validation_metrics == {"loss": 0.25, "auc": 0.75, "per_class": [0.5, 1.0]}
    assert checkpoint.validation_metrics == {}
    reloaded = TrialCheckpoints(store.directory).latest_valid()
    assert dict(reloaded.metadata) == dict(updated.metadata)
    assert read_checkpoint(checkpoint.path).metadata["seed"] == 3
    assert updated.verify() == [] and reloaded.verify() == []
    assert [name.name for name in checkpoint.path.iterdir() if name.name.startswith(".")] == []


def test_a_later_validation_replaces_the_earlier_one(store, checkpoint):
    store.record_validation(checkpoint, {"loss": 0.5, "old": 1})
    updated = store.record_validation(checkpoint, {"loss": 0.25})

    on_disk = json.loads((checkpoint.path / "metadata.json").read_text())
    assert on_disk["validation_metrics"] == {"loss": 0.25} == updated.validation_metrics
    assert on_disk["files"] == dict(checkpoint.metadata)["files"]


@pytest.mark.parametrize(
    ("metrics", "error", "match"),
    [
        ([("loss", 0.5)], TypeError, "must be a dict of metric name to value"),
        ({"loss": object()}, TypeError, r"validation_metrics\['loss'\] must be JSON"),
    ],
)
def test_rejects_metrics_that_are_not_json(store, checkpoint, metrics, error, match):
    with pytest.raises(error, match=match):
        store.record_validation(checkpoint, metrics)
    assert read_checkpoint(checkpoint.path).validation_metrics == {}


def test_validation_metrics_given_at_write_time(store):
    with store.write({"steps_completed": 1, "validation_metrics": {"loss": 0.1}}) as pending:
        pass
    assert pending.checkpoint.validation_metrics == {"loss": 0.1}
