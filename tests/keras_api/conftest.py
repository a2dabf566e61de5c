"""Helpers of the new Keras API's tests: a stand-in for one process of a job, and the command."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
import yaml

from det_estimator.store import ExperimentStore, State

COMMAND = str(Path(sys.executable).with_name("det-estimator"))
WORKERS = Path(__file__).parent / "workers"


class OneOfMany:
    """Process ``rank`` of ``size`` as the sharding code sees it; its collectives return what they are told to.

    ``allgather`` returns ``gathered`` with this process's own value put at its rank.
    """

    def __init__(self, rank: int, size: int, others: Optional[list[Any]] = None) -> None:
        self.rank = rank
        self.size = size
        self.others = others

    def allgather(self, stuff: Any) -> list[Any]:
        everything = list(self.others or [stuff] * self.size)
        everything[self.rank] = stuff
        return everything


@pytest.fixture
def one_of_many():
    return OneOfMany


def det_command(store: Path, *args: Any, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Runs ``det-estimator --store STORE ARGS``; fails the test with its output when it fails and ``check``."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        result = subprocess.run(
            [COMMAND, "--store", str(store), *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"det-estimator {' '.join(map(str, args))} did not finish within {timeout} s: {expired.stdout}")
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@pytest.fixture
def det():
    return det_command


def assert_a_paused_dropout_run_resumes_to_the_uninterrupted_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entrypoint_script: str, environment_variables: list[str]
) -> None:
    """``workers/fit_dropout.py`` on 2 slots, run through, then paused at batch 20 and resumed: the same weights.

    The pause lands in the second epoch, after each process's short batch of the first (66
    and 65 records in batches of 4); the experiment runs the trial again from its checkpoint.
    """
    raw = {
        "name": "fit-dropout",
        "entrypoint_script": entrypoint_script,
        "hyperparameters": {"global_batch_size": 8},
        "records_per_epoch": 131,
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 3}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        "resources": {"slots_per_trial": 2},
        "reproducibility": {"experiment_seed": 1},
        "environment": {"environment_variables": environment_variables},
    }
    path = tmp_path / "dropout.yaml"
    path.write_text(yaml.safe_dump(raw))
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("DROPOUT_OUT", str(tmp_path / "uninterrupted.npy"))
    det_command(store, "experiment", "create", path, WORKERS, timeout=400)

    monkeypatch.setenv("DROPOUT_OUT", str(tmp_path / "resumed.npy"))
    monkeypatch.setenv("DROPOUT_PAUSE_AT", "20")
    monkeypatch.setenv("DROPOUT_MARKER", str(tmp_path / "paused"))
    det_command(store, "experiment", "create", path, WORKERS, timeout=400)
    with ExperimentStore(store) as opened:
        paused, resumed = opened.trial_runs(2)
    assert paused.state == State.PAUSED and 20 <= resumed.start_batches < 34
    np.testing.assert_array_equal(np.load(tmp_path / "resumed.npy"), np.load(tmp_path / "uninterrupted.npy"))
