"""The directories of runs' own files: named after their launcher, and removed once it died without removing them."""

import os
import subprocess
import sys
import tempfile

from det_estimator.orchestration._processes import _scratch_directory


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    return process.pid


def test_a_new_run_directory_removes_those_of_dead_launchers_only(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed = tmp_path / f".det-estimator-run-{dead_pid()}-abc123"
    running = tmp_path / f".det-estimator-run-{os.getpid()}-def456"
    unknown = tmp_path / ".det-estimator-run-xyz789"  # no launcher in its name: left alone
    for directory in (killed, running, unknown):
        directory.mkdir()
        (directory / "info.json").write_text("{}")

    scratch = _scratch_directory(None)
    assert not killed.exists()
    assert running.exists() and unknown.exists()
    assert os.path.basename(scratch.name).startswith(f".det-estimator-run-{os.getpid()}-")
    scratch.cleanup()


def test_a_shared_run_directory_leaves_the_others_alone(tmp_path):
    other_host_launcher = tmp_path / f".det-estimator-run-{dead_pid()}-abc123"
    other_host_launcher.mkdir()
    scratch = _scratch_directory(str(tmp_path))  # beside the checkpoints, seen by every host
    assert other_host_launcher.exists()
    assert os.path.dirname(scratch.name) == str(tmp_path)
    scratch.cleanup()
