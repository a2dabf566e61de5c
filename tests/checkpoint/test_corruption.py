import hashlib
import logging

import pytest

from det_estimator.checkpoint import TrialCheckpoints, read_checkpoint

INDEX = "model/model.ckpt-{steps}.index"


@pytest.fixture
def store(tmp_path):
    store = TrialCheckpoints(tmp_path)
    for steps in (1, 2, 3):
        with store.write({"steps_completed": steps}) as pending:
            (pending.path / "model").mkdir()
            (pending.path / INDEX.format(steps=steps)).write_bytes(b"index %d" % steps * 10)
            (pending.path / "model" / "checkpoint").write_text(f"model.ckpt-{steps}")
    return store


@pytest.fixture
def warnings_logged(caplog):
    caplog.set_level(logging.WARNING, logger="det_estimator.checkpoint")
    return caplog


def latest(store):
    return store.list()[-1]


def test_flipped_byte_falls_back_with_a_warning(store, warnings_logged):
    newest = latest(store)
    index = newest.path / INDEX.format(steps=3)
    data = bytearray(index.read_bytes())
    data[4] ^= 0x01
    index.write_bytes(bytes(data))

    assert newest.verify() == [
        f"{INDEX.format(steps=3)}: sha256 mismatch (expected {_sha(newest, 3)}, found {_now(index)})"
    ]
    assert store.latest_valid().steps_completed == 2
    [record] = warnings_logged.records
    assert "model/model.ckpt-3.index: sha256 mismatch" in record.getMessage()
    assert str(newest.path) in record.getMessage()


def test_truncated_file_is_a_size_mismatch(store, warnings_logged):
    index = latest(store).path / INDEX.format(steps=3)
    index.write_bytes(index.read_bytes()[:5])

    assert store.latest_valid().steps_completed == 2
    assert "model/model.ckpt-3.index: size mismatch (expected 70 bytes, found 5)" in warnings_logged.text


def test_deleted_file_is_missing(store, warnings_logged):
    (latest(store).path / INDEX.format(steps=3)).unlink()

    assert store.latest_valid().steps_completed == 2
    assert "model/model.ckpt-3.index: missing" in warnings_logged.text


def test_extra_file_is_reported(store, warnings_logged):
    (latest(store).path / "model" / "late.txt").write_text("added after sealing")

    assert store.latest_valid().steps_completed == 2
    assert "model/late.txt: not in the manifest" in warnings_logged.text


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "metadata.json is missing"),
        ('{"uuid": ', "metadata.json is not valid JSON"),
        ("[1, 2]", "metadata.json: the top level must be an object"),
        ('{"format_version": 9}', "metadata.json: format_version must be 1, found 9"),
    ],
)
def test_broken_metadata_is_skipped(store, warnings_logged, content, problem):
    newest = latest(store)
    metadata = newest.path / "metadata.json"
    if content is None:
        metadata.unlink()
    else:
        metadata.write_text(content)

    [found] = newest.verify()
    assert problem in found
    assert [c.steps_completed for c in store.list()] == [1, 2]
    assert store.latest_valid().steps_completed == 2
    assert f"{newest.path} is not a readable checkpoint: {problem}" in warnings_logged.text


def test_every_checkpoint_broken(store, warnings_logged):
    for checkpoint in store.list():
        (checkpoint.path / "model" / "checkpoint").write_text("changed")
    assert store.latest_valid() is None
    assert len(warnings_logged.records) == 3


def test_manifest_cannot_point_outside_the_checkpoint(store):
    newest = latest(store)
    metadata = newest.path / "metadata.json"
    metadata.write_text(metadata.read_text().replace('"model/checkpoint"', '"../outside"'))
    with pytest.raises(ValueError, match=r"files\['../outside'\]: not a file path inside the checkpoint"):
        read_checkpoint(newest.path)


def test_read_checkpoint_of_a_directory_that_is_not_one(tmp_path):
    with pytest.raises(ValueError, match=f"^{tmp_path} is not a readable checkpoint: metadata.json is missing$"):
        read_checkpoint(tmp_path)
    with pytest.raises(ValueError, match=f"{tmp_path / 'absent'} is not a checkpoint: it is not a directory"):
        read_checkpoint(tmp_path / "absent")


def _sha(checkpoint, steps):
    return checkpoint.metadata["files"][INDEX.format(steps=steps)]["sha256"]


def _now(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_quarantined_checkpoint_is_kept_but_takes_part_in_nothing(store, tmp_path):
    newest = latest(store)
    moved = store.quarantine(newest)
    assert moved == tmp_path / f".corrupt-{newest.uuid}" and (moved / "metadata.json").exists()
    assert [c.steps_completed for c in store.list()] == [1, 2]
    assert store.latest_valid().steps_completed == 2
    store.prune(save_latest=1, save_best=0, metric=None)
    store.remove_partials()
    assert [c.steps_completed for c in store.list()] == [2] and moved.exists()


def test_quarantine_refuses_a_directory_outside_the_trial(store, tmp_path):
    outsider = TrialCheckpoints(tmp_path / "other")
    with outsider.write({"steps_completed": 1}) as pending:
        (pending.path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a checkpoint of"):
        store.quarantine(pending.checkpoint)
