"""The lifecycle's tests run on the real store and on the in-memory one the core's unit tests use."""

import sys
from pathlib import Path

import pytest

from det_estimator.store import ExperimentStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from memory_store import MemoryStore  # noqa: E402


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    """A store the lifecycle records in: SQLite, or in memory (the lifecycle needs no more than its operations)."""
    if request.param == "memory":
        yield MemoryStore(tmp_path / "store-files")
        return
    with ExperimentStore(tmp_path / "store.sqlite") as opened:
        yield opened
