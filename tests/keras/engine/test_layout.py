"""The engine's layout holds: Keras' internals are reached in one module, and each engine module stays small."""

import re
from pathlib import Path

import det_estimator.keras

KERAS = Path(det_estimator.keras.__file__).parent
# What Keras 2.15 gives only privately: its source package and the attributes the engine reads or sets.
INTERNALS = re.compile(
    r"keras\.src|[.\"'](_steps_per_execution|_training_state|_trackable_children|_create_all_weights|"
    r"_random_generator|_rng_type|_maybe_init|_generator|_train_writer|_val_writer|_log_epoch_metrics|"
    r"_user_metrics|_user_weighted_metrics|_is_compiled|_in_multi_worker_mode|_dataset)\b"
)


def test_only_the_compat_module_reaches_into_keras_internals():
    reaches = {
        str(path.relative_to(KERAS)): sorted({match.group(0) for match in INTERNALS.finditer(path.read_text())})
        for path in sorted(KERAS.rglob("*.py"))
        if path.name != "_keras_compat.py"
    }
    assert {module: found for module, found in reaches.items() if found} == {}


def test_each_engine_module_stays_small():
    sizes = {path.name: len(path.read_text().splitlines()) for path in sorted((KERAS / "_engine").glob("*.py"))}
    assert len(sizes) >= 15 and max(sizes.values()) <= 500, sizes
