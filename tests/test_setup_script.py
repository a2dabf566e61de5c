"""How `make` and scripts/setup.sh pick the Python the venv is built from (PYTHON), with stand-in interpreters."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def fake_python(path: Path, version: str, log: Path, runs: tuple[str, ...] = ()) -> Path:
    """An executable that logs its arguments and answers setup.sh's questions as Python ``version`` would.

    ``python -m <one of runs>`` succeeds; anything else (making a venv, pip) fails.
    """
    modules = "|".join(f'"-m {module}"' for module in runs)
    succeeds = f'case "$1 $2" in {modules}) exit 0;; esac\n' if runs else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "{path} $*" >>"{log}"\n'
        'if [[ "$1" == "-c" ]]; then\n'
        f'    if [[ "$2" == *print* ]]; then echo {version}; fi\n'
        "    exit 0\n"
        "fi\n"
        f"{succeeds}"
        "exit 1\n"
    )
    path.chmod(0o755)
    return path


# What an outer `make` hands the commands it runs, which the set-up under test must not see.
_FROM_AN_OUTER_MAKE = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "STACK", "CURRENT_PYTHON")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("given", ["environment", "command line"])
def test_make_hands_python_to_setup_and_runs_the_tools_with_the_venvs(tmp_path, given):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    seen = tmp_path / "seen"
    (repo / "scripts" / "setup.sh").write_text(f'echo "PYTHON=${{PYTHON:-}} DET_VENV=$DET_VENV" >"{seen}"\n')
    (repo / "scripts" / "setup_system.sh").write_text("exit 0\n")
    log = tmp_path / "calls"
    venv_python = fake_python(repo / ".venv" / "bin" / "python", "3.11", log, runs=("ruff", "mypy"))
    chosen = str(tmp_path / "bin" / "python3.9")

    # `make test` runs each stack's lane as `make test-stack STACK=...`, which these would inherit.
    env = {key: value for key, value in os.environ.items() if key not in _FROM_AN_OUTER_MAKE + ("PYTHON",)}
    command = ["make", "-s", "lint"]
    if given == "environment":
        env["PYTHON"] = chosen
    else:
        command.append(f"PYTHON={chosen}")
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stdout + result.stderr
    assert seen.read_text().strip() == f"PYTHON={chosen} DET_VENV=.venv"
    assert log.read_text().splitlines() == [
        f"{venv_python} -m ruff check .",
        f"{venv_python} -m ruff format --check .",
        f"{venv_python} -m mypy det_estimator",
    ]


def run_setup(tmp_path: Path, python: Path, venv: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in _FROM_AN_OUTER_MAKE + ("DET_VENV",)}
    env.update(PYTHON=str(python), DET_VENV=str(venv))
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60
    )


def test_setup_recreates_a_venv_of_another_python_than_the_one_python_names(tmp_path):
    log = tmp_path / "calls"
    venv = tmp_path / "venv"
    fake_python(venv / "bin" / "python", "3.11", log)
    (venv / "kept").write_text("")
    python = fake_python(tmp_path / "bin" / "python3.9", "3.9", log)

    result = run_setup(tmp_path, python, venv)

    # The stand-in cannot make a venv, so set-up stops there, after recreating.
    assert result.returncode != 0
    assert f"{venv} has Python 3.11, PYTHON={python} is 3.9: recreating it" in result.stdout
    assert f"{python} -m venv {venv}" in log.read_text()
    assert not (venv / "kept").exists()


def test_setup_keeps_a_venv_of_the_python_that_python_names(tmp_path):
    log = tmp_path / "calls"
    venv = tmp_path / "venv"
    venv_python = fake_python(venv / "bin" / "python", "3.9", log)
    (venv / "kept").write_text("")
    python = fake_python(tmp_path / "bin" / "python3.9", "3.9", log)

    result = run_setup(tmp_path, python, venv)

    # It goes on to install into the venv, which the stand-in refuses.
    assert "recreating" not in result.stdout
    assert f"{venv_python} -m pip" in log.read_text()
    assert f"{python} -m venv" not in log.read_text()
    assert (venv / "kept").exists()


def test_setup_refuses_a_python_that_is_not_a_supported_one_even_with_a_venv(tmp_path):
    log = tmp_path / "calls"
    venv = tmp_path / "venv"
    fake_python(venv / "bin" / "python", "3.11", log)
    (venv / "kept").write_text("")
    python = tmp_path / "bin" / "python3.12"
    python.parent.mkdir()
    python.write_text("#!/usr/bin/env bash\nexit 1\n")
    python.chmod(0o755)

    result = run_setup(tmp_path, python, venv)

    assert result.returncode == 1
    assert f"PYTHON={python} is not a Python 3.9, 3.10 or 3.11" in result.stderr
    assert (venv / "kept").exists()


def run_current_setup(python: Path, venv: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in _FROM_AN_OUTER_MAKE + ("DET_VENV",)}
    env.update(STACK="current", PYTHON=str(python), DET_VENV=str(venv))
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60
    )


def test_current_stack_refuses_a_python_older_than_3_10(tmp_path):
    python = tmp_path / "bin" / "python3.9"
    python.parent.mkdir()
    python.write_text("#!/usr/bin/env bash\nexit 1\n")  # fails the stack's version check, as a 3.9 would
    python.chmod(0o755)

    result = run_current_setup(python, tmp_path / "venv")

    assert result.returncode == 1
    assert f"PYTHON={python} is not a Python 3.10, 3.11, 3.12 or 3.13" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_current_stack_installs_tensorflow_2_21_and_tf_keras_without_horovod(tmp_path):
    log = tmp_path / "calls"
    venv = tmp_path / "venv"
    venv_python = fake_python(venv / "bin" / "python", "3.12", log)
    python = fake_python(tmp_path / "bin" / "python3.12", "3.12", log)

    result = run_current_setup(python, venv)

    # The stand-in refuses the install, so set-up stops at the stack's pip install.
    assert result.returncode != 0
    calls = log.read_text()
    assert "installing TensorFlow 2.21.0 (CPU), tf-keras 2.21.0" in result.stdout
    assert "tensorflow-cpu==2.21.0 tf-keras==2.21.0" in calls
    assert f"{venv_python} -m pip" in calls
    assert "horovod" not in calls.lower() and "cmake" not in calls


def test_setup_refuses_an_unknown_stack(tmp_path):
    env = dict(os.environ, STACK="newest", DET_VENV=str(tmp_path / "venv"))

    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env=env, capture_output=True, text=True)

    assert result.returncode == 1
    assert "STACK=newest is neither estimator" in result.stderr
    assert not (tmp_path / "venv").exists()
