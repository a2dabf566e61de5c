"""Scratch model directories: a killed process's directory is removed by the next one, a live one's never."""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from det_estimator.estimator import _scratch
from det_estimator.estimator._scratch import PREFIX, remove_abandoned, scratch_model_dir

HOLDER = textwrap.dedent(
    """
    import importlib.util, sys, time
    from pathlib import Path

    # The module alone, by its file: the estimator package would import TensorFlow.
    spec = importlib.util.spec_from_file_location("scratch", sys.argv[3])
    scratch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scratch)
    scratch_model_dir = scratch.scratch_model_dir

    with scratch_model_dir(int(sys.argv[2]), Path(sys.argv[1])) as directory:
        (Path(directory) / "model.ckpt-1.data").write_bytes(b"weights")
        print(directory, flush=True)
        time.sleep(600)
    """
)


def start_holder(root: Path, rank: int) -> tuple[subprocess.Popen, Path]:
    """A process holding a scratch directory under ``root`` until it is killed; and that directory."""
    command = [sys.executable, "-c", HOLDER, str(root), str(rank), _scratch.__file__]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    return process, Path(process.stdout.readline().strip())


def test_the_directory_of_a_killed_process_goes_and_that_of_a_live_one_stays(tmp_path):
    killed, killed_dir = start_holder(tmp_path, 0)
    alive, alive_dir = start_holder(tmp_path, 1)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert (killed_dir / "model.ckpt-1.data").exists(), "SIGKILL leaves the directory behind"

        with scratch_model_dir(0, tmp_path) as directory:
            assert Path(directory).is_dir() and Path(directory).name.startswith(f"{PREFIX}0-")
            assert not killed_dir.exists()
            assert (alive_dir / "model.ckpt-1.data").exists()
            # Its own directory is locked too: another removal leaves it.
            assert remove_abandoned(tmp_path) == []
        assert not Path(directory).exists()
    finally:
        alive.kill()
        alive.wait(timeout=30)
    assert remove_abandoned(tmp_path) == [alive_dir]


def test_directories_without_a_lock_file_are_left_alone(tmp_path):
    # Made by an older version, or by a process that has not locked its directory yet.
    unlocked = tmp_path / f"{PREFIX}0-older"
    unlocked.mkdir()
    (tmp_path / f"{PREFIX}1-a-file").write_text("not a directory")
    assert remove_abandoned(tmp_path) == []
    assert unlocked.is_dir()
