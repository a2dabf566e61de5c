"""Fixtures of the reducer tests."""

import pytest

from det_estimator.reducers import _ranking as ranking


@pytest.fixture(params=["native", "numpy"])
def ranking_kernels(request, monkeypatch):
    """Runs a test with the native ranking kernels, then again with NumPy doing their work."""
    if request.param == "numpy":
        monkeypatch.setattr(ranking, "kernels", None)
    elif ranking.kernels is None:
        pytest.skip("the native ranking kernels are not built (test_ranking_kernels.py fails for that)")
    return request.param
