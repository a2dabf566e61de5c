"""DeterminedCallback tests run in a directory of their own: core.init() off an experiment writes ./checkpoints."""

import pytest


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path
