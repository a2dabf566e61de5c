"""The supervisor ends as its command ended: with its exit status, or killed by the same signal."""

import signal
import sys

import pytest

from det_estimator import launcher


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_supervisor_dies_by_the_signal_its_command_died_by(sig):
    command = [sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(sig)})"]
    process = launcher.start(command, env={}, supervised=True)
    output = launcher.output_pipe(process).read()
    assert process.wait(timeout=60) == -sig
    assert "Traceback" not in output, output


def test_the_supervisor_exits_with_its_commands_status():
    process = launcher.start([sys.executable, "-c", "raise SystemExit(3)"], env={}, supervised=True)
    launcher.output_pipe(process).read()
    assert process.wait(timeout=60) == 3
