"""A process that dies at any point of a checkpoint operation leaves the sealed checkpoints intact."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import det_estimator
from det_estimator.checkpoint import TrialCheckpoints

REPO_ROOT = Path(det_estimator.__file__).resolve().parent.parent

# Writes one complete checkpoint, then dies at the point named by argv[2] (os._exit skips every
# `finally` and context-manager exit, like a kill -9 or a power loss would).
SCRIPT = textwrap.dedent(
    """
    import os, shutil, sys
    from det_estimator.checkpoint import TrialCheckpoints

    def die(*args, **kwargs):
        os._exit(1)

    store = TrialCheckpoints(sys.argv[1])
    crash_point = sys.argv[2]
    with store.write({"steps_completed": 1}) as pending:
        os.makedirs(pending.path / "model")
        (pending.path / "model" / "model.ckpt-1.index").write_bytes(b"first")
    first = pending.checkpoint

    if crash_point == "in_block":
        with store.write({"steps_completed": 2}) as pending:
            os.makedirs(pending.path / "model")
            (pending.path / "model" / "model.ckpt-2.index").write_bytes(b"second")
            os._exit(1)
    if crash_point == "before_rename":
        os.rename = die  # metadata.json is complete, the directory is not yet renamed
        with store.write({"steps_completed": 2}) as pending:
            (pending.path / "model.ckpt-2.index").write_bytes(b"second")
    if crash_point == "in_delete":
        shutil.rmtree = die  # renamed to a hidden name, not yet removed
        store.delete(first)
    if crash_point == "in_record_validation":
        os.replace = die  # the new metadata.json is written to a temporary file only
        store.record_validation(first, {"loss": 0.5})
    sys.exit("the crash point was not reached")
    """
)


def crash(directory: Path, crash_point: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory), crash_point],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr


@pytest.mark.parametrize("crash_point", ["in_block", "before_rename"])
def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, crash_point):
    crash(tmp_path, crash_point)
    store = TrialCheckpoints(tmp_path)

    [first] = store.list()
    assert first.steps_completed == 1
    assert store.latest_valid() == first
    [leftover] = [path for path in tmp_path.iterdir() if path.name.startswith(".partial-")]
    assert (leftover / "metadata.json").exists() == (crash_point == "before_rename")

    assert store.remove_partials() == [leftover]
    assert sorted(tmp_path.iterdir()) == [first.path]
    assert store.latest_valid() == first


def test_crash_while_deleting_leaves_no_visible_checkpoint(tmp_path):
    crash(tmp_path, "in_delete")
    store = TrialCheckpoints(tmp_path)

    assert store.list() == [] and store.latest_valid() is None
    [leftover] = list(tmp_path.iterdir())
    assert leftover.name.startswith(".deleting-")
    assert store.remove_partials() == [leftover]
    assert list(tmp_path.iterdir()) == []


def test_crash_while_recording_validation_keeps_the_old_metadata(tmp_path):
    crash(tmp_path, "in_record_validation")
    store = TrialCheckpoints(tmp_path)

    [first] = store.list()
    assert store.latest_valid() == first
    assert first.validation_metrics == {}
    [temporary] = [path for path in first.path.iterdir() if path.name.endswith(".tmp")]
    assert json.loads(temporary.read_text())["validation_metrics"] == {"loss": 0.5}

    assert store.remove_partials() == [temporary]
    assert sorted(path.name for path in first.path.iterdir()) == ["metadata.json", "model"]
    assert first.verify() == []
