import re
import subprocess
import sys
from pathlib import Path

from det_estimator import __version__

COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_console_script_reports_its_version():
    result = subprocess.run([COMMAND, "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.strip() == f"det-estimator {__version__}"


def test_env_lists_the_stack_and_horovods_build():
    result = subprocess.run([COMMAND, "env"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in result.stdout.splitlines())
    assert rows["tensorflow"].startswith("2.15.")
    assert rows["horovod"] == "0.28.1"
    assert "TensorFlow" in rows["horovod built with"] and "controllers: Gloo" in rows["horovod built with"]


def test_no_command_is_a_usage_error():
    result = subprocess.run([COMMAND], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: det-estimator" in result.stdout
