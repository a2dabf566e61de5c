"""The engine's layout holds: each engine module stays small (Keras' internals: test_keras_internals.py)."""

from pathlib import Path

import det_estimator.keras

ENGINE = Path(det_estimator.keras.__file__).parent / "_engine"


def test_each_engine_module_stays_small():
    sizes = {path.name: len(path.read_text().splitlines()) for path in sorted(ENGINE.glob("*.py"))}
    assert len(sizes) >= 15 and max(sizes.values()) <= 500, sizes
