"""copy_checkpoint: a sealed checkpoint copied whole and checked, or refused with nothing left behind."""

import os
from pathlib import Path

import pytest

from det_estimator.checkpoint import CheckpointCopyError, TrialCheckpoints, _copy, copy_checkpoint, read_checkpoint

FILES = {
    "model/checkpoint": b"model.ckpt-3",
    "model/model.ckpt-3.index": b"index" * 100,
    "raw/variables/variables.data-00000-of-00001": os.urandom(3 << 20),  # several chunks
    "notes.txt": b"",
}


@pytest.fixture
def sealed(tmp_path) -> Path:
    with TrialCheckpoints(tmp_path / "trial").write({"steps_completed": 3, "validation_metrics": {"loss": 1.0}}) as c:
        for name, data in FILES.items():
            (c.path / name).parent.mkdir(parents=True, exist_ok=True)
            (c.path / name).write_bytes(data)
    return c.checkpoint.path


def files_under(directory: Path) -> dict[str, bytes]:
    return {
        path.relative_to(directory).as_posix(): path.read_bytes() for path in directory.rglob("*") if path.is_file()
    }


def test_a_copy_holds_every_file_and_the_metadata_and_verifies_as_the_original(sealed, tmp_path):
    copied = copy_checkpoint(sealed, tmp_path / "out" / "deep" / "copy")

    destination = tmp_path / "out" / "deep" / "copy"
    assert copied.checkpoint.path == destination
    assert files_under(destination) == files_under(sealed)
    assert copied.files == len(FILES) + 1
    assert copied.size_bytes == sum(len(data) for data in FILES.values()) + (sealed / "metadata.json").stat().st_size
    assert copied.checkpoint.verify() == []
    assert read_checkpoint(destination).metadata == read_checkpoint(sealed).metadata
    assert os.listdir(destination.parent) == ["copy"]  # no temporary left beside it


def test_an_existing_empty_directory_receives_the_copy(sealed, tmp_path):
    (tmp_path / "empty").mkdir()
    copy_checkpoint(sealed, tmp_path / "empty")
    assert files_under(tmp_path / "empty") == files_under(sealed)


def _flip_a_byte(checkpoint: Path) -> str:
    path = checkpoint / "model" / "model.ckpt-3.index"
    data = bytearray(path.read_bytes())
    data[7] ^= 1
    path.write_bytes(bytes(data))
    return "model/model.ckpt-3.index: sha256 mismatch"


def _delete_a_file(checkpoint: Path) -> str:
    (checkpoint / "raw" / "variables" / "variables.data-00000-of-00001").unlink()
    return "raw/variables/variables.data-00000-of-00001: missing"


def _truncate_a_file(checkpoint: Path) -> str:
    (checkpoint / "model" / "checkpoint").write_bytes(b"model")
    return "model/checkpoint: size mismatch (expected 12 bytes, found 5)"


def _add_a_file(checkpoint: Path) -> str:
    (checkpoint / "model" / "extra").write_bytes(b"x")
    return "model/extra: not in the manifest"


@pytest.mark.parametrize("damage", [_flip_a_byte, _delete_a_file, _truncate_a_file, _add_a_file])
def test_a_checkpoint_whose_files_are_not_as_sealed_is_refused_and_nothing_is_left(sealed, tmp_path, damage):
    problem = damage(sealed)
    with pytest.raises(CheckpointCopyError, match="does not hold the files it was sealed with") as refused:
        copy_checkpoint(sealed, tmp_path / "new" / "copy")
    assert [line for line in refused.value.problems if line.startswith(problem)], refused.value.problems
    assert not (tmp_path / "new").exists()  # not even the folder made for it


def test_a_checkpoint_without_readable_metadata_or_directory_is_refused(sealed, tmp_path):
    (sealed / "metadata.json").write_text("{", encoding="utf-8")
    with pytest.raises(CheckpointCopyError, match="metadata.json is not valid JSON"):
        copy_checkpoint(sealed, tmp_path / "copy")
    (sealed / "metadata.json").unlink()
    with pytest.raises(CheckpointCopyError, match="is not a sealed checkpoint: its metadata.json cannot be read"):
        copy_checkpoint(sealed, tmp_path / "copy")
    with pytest.raises(CheckpointCopyError, match="There is no checkpoint directory at .*: its files are gone"):
        copy_checkpoint(tmp_path / "nowhere", tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_a_destination_that_holds_anything_is_a_file_or_lies_inside_the_checkpoint_is_refused(
    sealed, tmp_path, monkeypatch
):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(CheckpointCopyError, match="full exists and is not empty. Name a directory that does not"):
        copy_checkpoint(sealed, tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["kept.txt"]
    (tmp_path / "file").write_text("mine", encoding="utf-8")
    with pytest.raises(CheckpointCopyError, match="file is a file"):
        copy_checkpoint(sealed, tmp_path / "file")
    with pytest.raises(CheckpointCopyError, match="is inside the checkpoint"):
        copy_checkpoint(sealed, sealed / "copy")
    assert read_checkpoint(sealed).verify() == []
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    with pytest.raises(CheckpointCopyError, match="is the current directory, which the copy would replace"):
        copy_checkpoint(sealed, Path("."))
    with pytest.raises(CheckpointCopyError, match="file is a file: .*copy cannot be made under it"):
        copy_checkpoint(sealed, tmp_path / "file" / "deeper" / "copy")
    os.chmod(tmp_path / "here", 0o500)
    if not os.access(tmp_path / "here", os.W_OK):  # root writes anywhere
        with pytest.raises(CheckpointCopyError, match="Cannot write into .*here: Permission denied"):
            copy_checkpoint(sealed, tmp_path / "here" / "copy")


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError(28, "No space left on device")])
def test_a_copy_that_fails_midway_leaves_no_directory_that_looks_complete(sealed, tmp_path, monkeypatch, failure):
    copy_file, calls = _copy._copy_file, []

    def fail_on_the_third(*args):
        calls.append(args)
        if len(calls) == 3:
            raise failure
        return copy_file(*args)

    monkeypatch.setattr(_copy, "_copy_file", fail_on_the_third)
    (tmp_path / "out").mkdir()
    with pytest.raises(failure if isinstance(failure, type) else OSError):
        copy_checkpoint(sealed, tmp_path / "out" / "new" / "copy")
    assert os.listdir(tmp_path / "out") == []  # neither the copy, its temporary, nor the folder made for it


def test_a_copy_killed_outright_is_removed_by_the_next_copy_to_the_same_place_unless_its_process_runs(sealed, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)  # exited: no process has that id now (pid reuse aside)
    abandoned = out / f".copy.copy-{dead_pid}-{'a' * 32}"
    running = out / f".copy.copy-{os.getpid()}-{'b' * 32}"  # another download, still copying
    elsewhere = out / f".other.copy-{dead_pid}-{'c' * 32}"  # a copy to another destination
    for hidden in (abandoned, running, elsewhere):
        (hidden / "model").mkdir(parents=True)
        (hidden / "model" / "half.bin").write_bytes(b"\0" * 10)

    copy_checkpoint(sealed, out / "copy")

    assert sorted(os.listdir(out)) == sorted(["copy", running.name, elsewhere.name])
