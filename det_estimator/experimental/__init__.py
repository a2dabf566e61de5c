"""Experimental entry points, as in the reference system: ``det.experimental.estimator.init``."""

import importlib
from typing import Any

__all__ = ["estimator"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the estimator API imports TensorFlow.
    if name == "estimator":
        return importlib.import_module("det_estimator.experimental.estimator")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
