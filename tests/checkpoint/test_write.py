import hashlib
import json
import math
import re

import pytest

from det_estimator.checkpoint import Checkpoint, TrialCheckpoints, read_checkpoint

FILES = {
    "model/checkpoint": b'model_checkpoint_path: "model.ckpt-7"\n',
    "model/model.ckpt-7.index": b"index-bytes",
    "model/model.ckpt-7.data-00000-of-00001": bytes(range(256)) * 50,
    "saved_models/serving/saved_model.pb": b"graph",
    "saved_models/serving/variables/variables.index": b"",
    "hook_state.txt": b"written by a RunHook",
}


def write_files(root, files):
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_round_trip_with_nested_files(tmp_path):
    store = TrialCheckpoints(tmp_path / "trial")
    with store.write({"steps_completed": 7, "hparams": {"lr": 0.1, "layers": (3, 4)}}) as pending:
        assert pending.path.is_dir() and pending.path.parent == store.directory
        write_files(pending.path, FILES)
        pending.metadata["data_position"] = {"epoch": 0, "batches": 7}
    checkpoint = pending.checkpoint

    assert checkpoint.path == store.directory / checkpoint.uuid
    assert checkpoint.uuid == pending.uuid and re.fullmatch(r"[0-9a-f]{32}", checkpoint.uuid)
    assert not pending.path.exists()
    assert sorted(p.name for p in store.directory.iterdir()) == [checkpoint.uuid]
    for name, data in FILES.items():
        assert (checkpoint.path / name).read_bytes() == data
    assert store.list() == [checkpoint]
    assert store.latest_valid() == checkpoint
    assert checkpoint.verify() == []
    assert checkpoint.steps_completed == 7


def test_metadata_content(tmp_path):
    store = TrialCheckpoints(tmp_path)
    with store.write({"steps_completed": 3, "seed": 42, "loss": math.inf}) as pending:
        write_files(pending.path, FILES)
    checkpoint = pending.checkpoint
    on_disk = json.loads((checkpoint.path / "metadata.json").read_text())

    assert on_disk == dict(checkpoint.metadata)
    assert on_disk["uuid"] == checkpoint.uuid
    assert on_disk["format_version"] == 1
    assert on_disk["created"].endswith("+00:00")
    assert on_disk["seed"] == 42 and on_disk["loss"] == math.inf
    assert list(on_disk["files"]) == sorted(FILES)
    for name, data in FILES.items():
        assert on_disk["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert read_checkpoint(checkpoint.path) == checkpoint
    assert checkpoint.validation_metrics == {}


def test_caller_metadata_is_copied(tmp_path):
    metadata = {"steps_completed": 1, "config": {"name": "a"}}
    store = TrialCheckpoints(tmp_path)
    with store.write(metadata) as pending:
        metadata["config"]["name"] = "changed"
    assert pending.checkpoint.metadata["config"] == {"name": "a"}
    with pytest.raises(TypeError):
        pending.checkpoint.metadata["steps_completed"] = 2


def test_block_that_raises_leaves_nothing(tmp_path):
    store = TrialCheckpoints(tmp_path)
    with pytest.raises(RuntimeError, match="boom"), store.write({"steps_completed": 1}) as pending:
        write_files(pending.path, FILES)
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    assert store.list() == [] and store.latest_valid() is None
    with pytest.raises(RuntimeError, match="not sealed"):
        _ = pending.checkpoint


def test_checkpoint_is_not_available_inside_the_block(tmp_path):
    with TrialCheckpoints(tmp_path).write({"steps_completed": 1}) as pending:
        inside = pytest.raises(RuntimeError, match=r"read `\.checkpoint` after the block")
        with inside:
            _ = pending.checkpoint
    assert pending.checkpoint.steps_completed == 1


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({}, "must have an int `steps_completed`"),
        ({"steps_completed": "5"}, r"Received: steps_completed='5'"),
        ({"steps_completed": True}, "steps_completed=True"),
        ({"steps_completed": -1}, ">= 0"),
        ({"steps_completed": 1, "files": {}}, r"may not set \['files'\]"),
    ],
)
def test_rejects_bad_steps_and_reserved_keys(tmp_path, metadata, match):
    with pytest.raises(ValueError, match=match), TrialCheckpoints(tmp_path).write(metadata):
        pytest.fail("the block must not run")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({"steps_completed": 1, "seed": object()}, r"metadata\['seed'\] must be JSON"),
        ({"steps_completed": 1, "hp": {"sizes": [1, {2}]}}, r"metadata\['hp'\]\['sizes'\]\[1\] must be JSON"),
        ({"steps_completed": 1, "hp": {1: "a"}}, r"metadata\['hp'\] must have str keys"),
    ],
)
def test_rejects_metadata_that_is_not_json(tmp_path, metadata, match):
    with pytest.raises(TypeError, match=match), TrialCheckpoints(tmp_path).write(metadata):
        pytest.fail("the block must not run")


def test_metadata_added_in_the_block_is_checked(tmp_path):
    store = TrialCheckpoints(tmp_path)
    with pytest.raises(TypeError, match=r"metadata\['bad'\]"), store.write({"steps_completed": 1}) as pending:
        pending.metadata["bad"] = {1, 2}
    assert list(tmp_path.iterdir()) == []


def test_caller_may_not_write_top_level_metadata_json(tmp_path):
    store = TrialCheckpoints(tmp_path)
    expected = pytest.raises(ValueError, match="metadata.json is written by det-estimator")
    with expected, store.write({"steps_completed": 1}) as pending:
        (pending.path / "metadata.json").write_text("{}")
    assert list(tmp_path.iterdir()) == []


def test_list_orders_by_steps_then_creation(tmp_path):
    store = TrialCheckpoints(tmp_path)
    written = []
    for steps in (5, 1, 5, 3):
        with store.write({"steps_completed": steps}) as pending:
            (pending.path / "f").write_text(str(steps))
        written.append(pending.checkpoint)
    assert store.list() == [written[1], written[3], written[0], written[2]]
    assert TrialCheckpoints(tmp_path).latest_valid() == written[2]


def test_empty_checkpoint_and_unrelated_entries(tmp_path):
    store = TrialCheckpoints(tmp_path)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    (tmp_path / ".hidden").mkdir()
    with store.write({"steps_completed": 0}) as pending:
        pass
    assert pending.checkpoint.metadata["files"] == {}
    assert store.list() == [pending.checkpoint]
    assert store.latest_valid() == pending.checkpoint


def test_delete_is_tolerant_and_refuses_foreign_paths(tmp_path):
    store = TrialCheckpoints(tmp_path / "trial")
    with store.write({"steps_completed": 1}) as pending:
        write_files(pending.path, FILES)
    checkpoint = pending.checkpoint
    store.delete(checkpoint)
    store.delete(checkpoint)
    assert list(store.directory.iterdir()) == []

    foreign = Checkpoint(uuid="x", path=tmp_path, metadata={})
    with pytest.raises(ValueError, match="refusing to delete"):
        store.delete(foreign)
    assert tmp_path.exists()
