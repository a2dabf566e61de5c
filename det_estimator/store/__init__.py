"""The experiment store: what the ``det-estimator`` command knows of every experiment.

One SQLite database (WAL mode) per user by default, at
``$XDG_DATA_HOME/det-estimator/store.sqlite``, or where ``--store`` or
``DET_ESTIMATOR_STORE`` points: experiments with their configs and states, trials
with their hyperparameters, training and validation metrics per step, and
checkpoints (uuid, step, path, size, metadata). Trial logs are kept beside it.
Checkpoint files themselves live in the experiment's ``checkpoint_storage``; the
store only records them.
"""

from det_estimator.store._recorder import StoreRecorder
from det_estimator.store._schema import SCHEMA_VERSION, StoreError
from det_estimator.store._store import (
    ACTIVE,
    COMPLETED,
    ERROR,
    INTERRUPTED,
    PAUSED,
    STORE_VARIABLE,
    ExperimentStore,
    UnknownIdError,
    default_store_path,
)

__all__ = [
    "ACTIVE",
    "COMPLETED",
    "ERROR",
    "INTERRUPTED",
    "PAUSED",
    "SCHEMA_VERSION",
    "STORE_VARIABLE",
    "ExperimentStore",
    "StoreError",
    "StoreRecorder",
    "UnknownIdError",
    "default_store_path",
]
