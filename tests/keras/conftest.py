"""Fixtures of the Keras trial's tests: the analytic Keras trial (tests/support/analytic_keras_trial.py)."""

from pathlib import Path

import pytest

SUPPORT = Path(__file__).parent.parent / "support"


@pytest.fixture(scope="session")
def analytic_keras(module_loader):
    """The analytic_keras_trial module (it imports analytic_closed_form, loaded first)."""
    module_loader(SUPPORT / "analytic_closed_form.py")
    return module_loader(SUPPORT / "analytic_keras_trial.py")
