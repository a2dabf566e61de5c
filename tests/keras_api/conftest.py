"""Helpers of the new Keras API's tests: a stand-in for one process of a job, and the command."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

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
