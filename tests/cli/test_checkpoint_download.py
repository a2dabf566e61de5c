"""``checkpoint download``: a checked copy of a checkpoint's files, or a refusal that says why and leaves nothing."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from det_estimator.checkpoint import read_checkpoint
from det_estimator.store import ExperimentStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402
from sealed_checkpoints import ESTIMATOR_FILES, seal  # noqa: E402


@pytest.fixture
def store_path(tmp_path) -> Path:
    return record_one_experiment(tmp_path)


def download(store_path: Path, *argv: str, status: int = 0) -> str:
    code, output = run_command(["--store", str(store_path), "checkpoint", "download", *argv])
    assert code == status, output
    assert "Traceback" not in output, output
    return output


def files_under(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_download_copies_every_file_and_names_the_call_that_loads_the_copy(store_path, tmp_path):
    path = seal(store_path, ESTIMATOR_FILES, 4)
    output_dir = tmp_path / "shipped" / "model"

    output = download(store_path, path.name[:6], "--output-dir", str(output_dir))

    assert files_under(output_dir) == files_under(path)
    assert read_checkpoint(output_dir).verify() == []
    assert output.splitlines() == [
        f"Downloaded checkpoint {path.name} (7 files, {_size(path)}, each checked against its manifest) to "
        f"{output_dir}",
        f"Load with:   det.estimator.load_estimator_from_checkpoint_path({str(output_dir)!r}, serving_name='raw')",
    ]


def _size(path: Path) -> str:
    from det_estimator.orchestration import format_size

    return format_size(sum(len(data) for data in files_under(path).values()))


def test_download_with_json_and_into_checkpoints_uuid_by_default(store_path, tmp_path, monkeypatch):
    path = seal(store_path, ESTIMATOR_FILES, 4)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")

    shown = json.loads(download(store_path, path.name, "--json"))

    copy = tmp_path / "work" / "checkpoints" / path.name
    assert files_under(copy) == files_under(path)
    assert shown == {
        "uuid": path.name,
        "output_dir": str(copy),
        "files": 7,
        "size_bytes": sum(len(data) for data in files_under(path).values()),
        "load_with": [f"det.estimator.load_estimator_from_checkpoint_path({str(copy)!r}, serving_name='raw')"],
    }


def test_a_checkpoint_that_retention_deleted_or_whose_directory_is_gone_is_refused(store_path, tmp_path):
    deleted = seal(store_path, ESTIMATOR_FILES, 4)
    shutil.rmtree(deleted)
    with ExperimentStore(store_path) as store:
        store.mark_checkpoints_deleted([deleted.name])
    removed = seal(store_path, ESTIMATOR_FILES, 8)
    shutil.rmtree(removed)

    output = download(store_path, deleted.name, "-o", str(tmp_path / "out"), status=2)
    assert f"Checkpoint {deleted.name} cannot be downloaded: checkpoint retention deleted its files." in output
    assert "`det-estimator checkpoint list 1` shows the checkpoints its experiment kept" in output
    output = download(store_path, removed.name, "-o", str(tmp_path / "out"), status=2)
    assert f"There is no checkpoint directory at {removed}: its files are gone" in output
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_whose_files_are_changed_or_missing_is_refused_naming_each(store_path, tmp_path):
    path = seal(store_path, ESTIMATOR_FILES, 4)
    (path / "raw" / "saved_model.pb").write_bytes(b"q" * 300)  # same size, other bytes
    (path / "model" / "model.ckpt-4.index").unlink()

    output = download(store_path, path.name, "-o", str(tmp_path / "out"), status=2)

    assert f"cannot be downloaded: {path} does not hold the files it was sealed with." in output
    assert "\n  model/model.ckpt-4.index: missing" in output  # what size alone shows comes first
    (path / "model" / "model.ckpt-4.index").write_bytes(b"index")
    output = download(store_path, path.name, "-o", str(tmp_path / "out"), status=2)
    assert "\n  raw/saved_model.pb: sha256 mismatch (expected " in output
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path).count("out") == 0


def test_a_directory_that_holds_anything_is_refused_and_kept_as_it_was(store_path, tmp_path):
    path = seal(store_path, ESTIMATOR_FILES, 4)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("mine", encoding="utf-8")

    output = download(store_path, path.name, "-o", str(tmp_path / "full"), status=2)

    assert f"{tmp_path / 'full'} exists and is not empty. Name a directory that does not exist yet" in output
    assert os.listdir(tmp_path / "full") == ["mine.txt"]
    (tmp_path / "empty").mkdir()
    download(store_path, path.name, "-o", str(tmp_path / "empty"))
    assert files_under(tmp_path / "empty") == files_under(path)


def test_an_unknown_or_ambiguous_uuid_is_refused(store_path, tmp_path):
    with ExperimentStore(store_path) as store:
        for uuid in ("abab1", "abab2"):
            store.record_checkpoint(1, uuid, 1, str(tmp_path / uuid), 0, {})
    assert "abab starts the uuids of 2 checkpoints (abab1, abab2)" in download(store_path, "abab", status=2)
    assert "There is no checkpoint aba in the store" in download(store_path, "aba", status=2)
    assert "There is no checkpoint cdcd in the store" in download(store_path, "cdcd", status=2)
