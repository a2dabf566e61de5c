"""This process's Python and NumPy random states, as JSON values a checkpoint keeps, and their restore.

Shared by the trial controllers (estimator and Keras), which gather every rank's state
into each checkpoint's metadata. Imports nothing of det-estimator, and no TensorFlow.
"""

import random
from typing import Any, cast

import numpy as np


def python_and_numpy_state() -> dict[str, Any]:
    """This process's Python and NumPy random states, as JSON values."""
    version, state, gauss = random.getstate()
    # The legacy form (the default): a tuple, not the dict of other bit generators.
    legacy = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    name, keys, position, has_gauss, cached = legacy
    return {
        "python": [version, list(state), gauss],
        "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached)],
    }


def restore_python_and_numpy_state(states: list[dict[str, Any]], rank: int) -> None:
    """Restores this process's states from :func:`python_and_numpy_state` of every process (by rank)."""
    if rank >= len(states):
        return
    version, state, gauss = states[rank]["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, position, has_gauss, cached = states[rank]["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
