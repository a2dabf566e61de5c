import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from det_estimator import __version__
from det_estimator.cli import build_parser

COMMAND = str(Path(sys.executable).with_name("det-estimator"))


def test_console_script_reports_its_version():
    result = subprocess.run([COMMAND, "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.strip() == f"det-estimator {__version__}"


# Slow: `horovodrun --check-build` imports every framework Horovod knows. In the default path,
# every distributed test runs on this stack, and the next test reads a --check-build report.
@pytest.mark.slow
@pytest.mark.horovod
def test_env_lists_the_stack_and_horovods_build():
    result = subprocess.run([COMMAND, "env"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in result.stdout.splitlines())
    assert rows["tensorflow"].startswith("2.15.")
    assert rows["horovod"] == "0.28.1"
    assert "TensorFlow" in rows["horovod built with"] and "controllers: Gloo" in rows["horovod built with"]


CHECK_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [ ] MPI
    [X] Gloo
"""


def test_env_lists_only_the_frameworks_whose_horovod_extension_was_built(tmp_path):
    # Horovod's --check-build marks PyTorch whenever horovod.torch imports, which it does
    # (with a warning) without its extension, as in a build with HOROVOD_WITHOUT_PYTORCH=1.
    import sysconfig

    from det_estimator.cli._environment import summarize_check_build

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / f"mpi_lib{suffix}").write_bytes(b"")
    (tmp_path / "torch").mkdir()
    assert summarize_check_build(CHECK_BUILD, tmp_path) == "frameworks: TensorFlow; controllers: Gloo"
    (tmp_path / "torch" / f"mpi_lib_v2{suffix}").write_bytes(b"")
    assert summarize_check_build(CHECK_BUILD, tmp_path) == "frameworks: TensorFlow, PyTorch; controllers: Gloo"


def test_no_command_is_a_usage_error():
    result = subprocess.run([COMMAND], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: det-estimator" in result.stdout


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every runnable command line's words, with its parser (aliases left out)."""
    actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not actions:
        yield prefix, parser
        return
    seen = set()
    for name, child in actions[0].choices.items():
        if id(child) not in seen:
            seen.add(id(child))
            yield from _commands(child, (*prefix, name))


def test_the_readme_names_every_command_without_json():
    without = {
        " ".join(words)
        for words, parser in _commands(build_parser())
        if not any("--json" in action.option_strings for action in parser._actions)
    }
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    (exceptions,) = re.findall(r"Every command takes `--json` \(except ([^)]*)\)", readme)
    assert set(re.findall(r"`([^`]+)`", exceptions)) == without


def test_the_store_may_be_named_before_or_after_the_command(tmp_path):
    parser = build_parser()
    assert parser.parse_args(["--store", "a.sqlite", "experiment", "list"]).store == "a.sqlite"
    assert parser.parse_args(["experiment", "list", "--store", "b.sqlite"]).store == "b.sqlite"
    assert parser.parse_args(["trial", "logs", "1", "--store", "b.sqlite"]).store == "b.sqlite"
    assert parser.parse_args(["--store", "a.sqlite", "job", "logs", "1", "--store", "b.sqlite"]).store == "b.sqlite"
    assert parser.parse_args(["experiment", "list"]).store is None
    absent = tmp_path / "absent.sqlite"
    result = subprocess.run(
        [COMMAND, "checkpoint", "list", "1", "--store", str(absent)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"det-estimator: error: There is no experiment store at {absent}. Give the --store (or DET_ESTIMATOR_STORE) "
        "of an existing store; `det-estimator experiment create` makes one.\n"
    )


def _help_of(parser: argparse.ArgumentParser, *words: str) -> str:
    """The one-line help a command's parent shows for ``words``' last one."""
    for word in words[:-1]:
        (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        parser = subparsers.choices[word]
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    (choice,) = [action for action in subparsers._choices_actions if action.dest == words[-1]]
    return choice.help


def test_the_help_of_resume_and_checkpoint_list_says_what_they_do():
    parser = build_parser()
    # experiment resume takes an INTERRUPTED or failed single-trial experiment too (README).
    assert _help_of(parser, "experiment", "resume").startswith("continue a paused, interrupted or failed experiment")
    # The columns checkpoint list prints: UUID TRIAL BATCHES STATE KEPT AS VALIDATION METRICS SIZE PATH.
    assert (
        _help_of(parser, "checkpoint", "list")
        == "uuid, trial, batches, state, kept as best or latest, metrics, size, path"
    )
