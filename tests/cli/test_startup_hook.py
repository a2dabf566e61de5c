"""The context directory's startup-hook.sh: run once per host before the processes, its exports reaching them."""

import textwrap

import pytest
import yaml

# Reports, as its validation, the value the hook exported, and which process saw it.
SCRIPT = textwrap.dedent(
    """
    import os

    import det_estimator as det

    with det.core.init() as core:
        value = float(os.environ["VALUE_FROM_HOOK"])
        with open(f"seen-by-rank-{core.distributed.rank}", "w") as seen:
            seen.write(os.environ["VALUE_FROM_HOOK"])
        for op in core.searcher.operations():
            core.train.report_validation_metrics(op.length, {"loss": value})
            if core.distributed.rank == 0:
                op.report_completed(value)
    """
)
HOOK = textwrap.dedent(
    """
    echo "hook output on its way to the log"
    echo ran >> hook-runs.txt
    export VALUE_FROM_HOOK=0.25
    """
)


def write_experiment(directory, hook: str, slots: int = 1, max_restarts: int = 0):
    directory.mkdir()
    (directory / "train.py").write_text(SCRIPT)
    (directory / "startup-hook.sh").write_text(hook)
    config = {
        "name": "hooked",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 4}},
        "resources": {"slots_per_trial": slots},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "checkpoints"},
        "max_restarts": max_restarts,
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("slots", [1, 2])  # on two: under horovodrun, or the TensorFlow launcher without Horovod
def test_the_hook_runs_once_per_host_before_every_process_and_its_exports_reach_them(det, tmp_path, slots):
    code = tmp_path / "code"
    config = write_experiment(code, HOOK, slots=slots)
    det.ok("experiment", "create", config, code, "--slots", str(slots))
    assert (code / "hook-runs.txt").read_text().splitlines() == ["ran"]  # one host: once
    assert [(code / f"seen-by-rank-{rank}").read_text() for rank in range(slots)] == ["0.25"] * slots
    (trial,) = det.json("experiment", "describe", 1)["trials"]
    assert trial["validations"][-1]["metrics"]["loss"] == 0.25
    log = det.ok("trial", "logs", 1).stdout
    assert "hook output on its way to the log" in log


def test_a_failing_hook_is_reported_as_such_and_not_restarted(det, tmp_path):
    code = tmp_path / "code"
    config = write_experiment(code, 'echo "cannot install the package" >&2\nexit 3\n', max_restarts=5)
    result = det("experiment", "create", config, code)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "startup-hook.sh failed with exit status 3 on " in result.stderr
    assert "so the trial's processes were not started" in result.stderr
    assert "restart 1 of 5" not in result.stdout + result.stderr
    assert not list(code.glob("seen-by-rank-*"))  # the command never ran
    (trial,) = det.json("experiment", "describe", 1)["trials"]
    assert trial["state"] == "ERROR" and len(trial["runs"]) == 1
    assert "cannot install the package" in det.ok("trial", "logs", 1).stdout


def test_without_a_hook_nothing_runs_before_the_command(det, tmp_path):
    code = tmp_path / "code"
    config = write_experiment(code, HOOK)
    (code / "startup-hook.sh").unlink()
    (code / "train.py").write_text(SCRIPT.replace('os.environ["VALUE_FROM_HOOK"]', '"0.5"'))
    det.ok("experiment", "create", config, code)
    assert "running startup-hook.sh" not in det.ok("trial", "logs", 1).stdout
