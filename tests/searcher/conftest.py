"""The searcher tests' shared harness (searcher_simulation.py), as a fixture."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sim(module_loader):
    """The module searcher_simulation: make_config, Simulation, simulate, check_resumes_everywhere, ..."""
    return module_loader(Path(__file__).with_name("searcher_simulation.py"))
