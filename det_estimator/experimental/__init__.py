"""Experimental entry points, as in the reference system: ``det.experimental.estimator.init``.

``det.experimental.keras.init``, the reference's native Keras API, is refused with a
message naming what replaces it.
"""

import importlib
from typing import Any

__all__ = ["estimator", "keras"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the estimator API imports TensorFlow.
    if name in ("estimator", "keras"):
        return importlib.import_module(f"det_estimator.experimental.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
