"""What the Keras porting tests do with the det-estimator command: run, pause, resume, find checkpoints."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from det_estimator.store import ExperimentStore

COMMAND = str(Path(sys.executable).with_name("det-estimator"))
TIMEOUT = 300


def det_command(store: Path, *args: object) -> subprocess.CompletedProcess:
    """Runs ``det-estimator --store STORE ARGS``; asserts it succeeded."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [COMMAND, "--store", str(store), *map(str, args)], capture_output=True, text=True, env=env, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def copy_context(source: Path, tmp_path: Path) -> Path:
    """A copy of a ported trial's directory whose checkpoints go under tmp_path."""
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    return directory


def write_config(context: Path, name: str, length: dict, slots: int) -> Path:
    """The directory's const.yaml with ``length`` as searcher.max_length and ``slots`` slots."""
    config = yaml.safe_load((context / "const.yaml").read_text())
    config["searcher"]["max_length"] = length
    config["resources"] = {"slots_per_trial": slots}
    config["checkpoint_storage"]["host_path"] = str(context / "checkpoints")
    path = context / name
    path.write_text(yaml.safe_dump(config))
    return path


def pause_after_first_checkpoint(store: Path, config: Path, context: Path) -> int:
    """Creates an experiment (the store's first) far longer than a test, pauses it after a checkpoint; its batches."""
    running = subprocess.Popen(
        [COMMAND, "--store", str(store), "experiment", "create", str(config), str(context)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    try:
        assert running.stdout is not None
        for line in running.stdout:
            if "checkpoint " in line and " after " in line:
                break
        det_command(store, "experiment", "pause", 1)
        output, _ = running.communicate(timeout=TIMEOUT)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 0 and "Experiment 1 PAUSED after " in output, output[-3000:]
    return json.loads(det_command(store, "experiment", "list", "--json").stdout)[0]["batches_trained"]


def set_length(store: Path, experiment_id: int, length: dict) -> None:
    """Sets a recorded experiment's searcher.max_length, so that a resume trains to it."""
    with ExperimentStore(store) as opened:
        experiment = opened.experiment(experiment_id)
        config = experiment.config
        config["searcher"]["max_length"] = length
        opened.update_experiment(experiment_id, config, experiment.slots, experiment.test)


def latest_checkpoint(store: Path, experiment_id: int) -> Path:
    """The path of an experiment's checkpoint of the most batches."""
    listed = json.loads(det_command(store, "checkpoint", "list", experiment_id, "--json").stdout)
    return Path(max(listed, key=lambda checkpoint: checkpoint["batches"])["path"])


def last_validation(store: Path, experiment_id: int) -> dict:
    """The last validation of an experiment's one trial."""
    (trial,) = json.loads(det_command(store, "experiment", "describe", experiment_id, "--json").stdout)["trials"]
    return trial["validations"][-1]
