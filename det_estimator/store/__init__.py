"""The experiment store: what the ``det-estimator`` command knows of every experiment.

One SQLite database (WAL mode) per user by default, at
``$XDG_DATA_HOME/det-estimator/store.sqlite``, or where ``--store`` or
``DET_ESTIMATOR_STORE`` points, which may also be a PostgreSQL database's URL (see
``_database``): experiments with their configs and states, trials
with their hyperparameters and runs, training and validation metrics per step, and
checkpoints (uuid, step, path, size, metadata), and the output logs of trials and jobs
(files beside an SQLite store, rows of a PostgreSQL one: see ``_logs``). TensorBoard
event files are kept beside it (for a PostgreSQL store, in the folder it records). Checkpoint files
themselves live in the experiment's ``checkpoint_storage``; the store only records them.
Reads return frozen records.

A store is recognised by its marker (the ``store_info`` table) before anything is
written, has an id of its own, and claims the folders it writes in; a copy of a store
is read-only until ``ExperimentStore.detach`` makes it one of its own. ``copy_store``
copies every record of a store into another, new or empty (SQLite or PostgreSQL), which
takes over its checkpoint folders.
"""

from det_estimator.store._copy import CopyReport, StoreCopyRefusedError, TableCopied, copy_store
from det_estimator.store._database import (
    StoreLocation,
    damaged_store_error,
    default_store_path,
    parse_store_location,
    store_location,
)
from det_estimator.store._errors import (
    ExperimentBusyError,
    NoStoreError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreUnavailableError,
    StoreUnusableError,
    StoreUpgradeNeededError,
    UnknownIdError,
)
from det_estimator.store._event_files import session_start
from det_estimator.store._identity import (
    DetachReport,
    FolderOwnedError,
    NothingToDetachError,
    StoreCopyError,
    folder_owner,
)
from det_estimator.store._jobs import BATCH_INFERENCE, JobRecord
from det_estimator.store._launchers import LEASE_SECONDS, launcher_alive, launcher_columns
from det_estimator.store._logs import LogKind, LogOwner, LogPart, LogWriter
from det_estimator.store._recorder import StoreRecorder
from det_estimator.store._records import (
    Assignment,
    BestValidation,
    CheckpointRecord,
    ExperimentRecord,
    MetricKind,
    MetricRecord,
    NewTrial,
    SearchState,
    State,
    TrialRecord,
    TrialRunRecord,
    to_json_value,
)
from det_estimator.store._restarts import RestartRecord
from det_estimator.store._schema import SCHEMA_VERSION, SchemaUpgrade
from det_estimator.store._store import (
    STORE_VARIABLE,
    ExperimentStore,
    trial_checkpoint_dir,
)

__all__ = [
    "BATCH_INFERENCE",
    "LEASE_SECONDS",
    "SCHEMA_VERSION",
    "SchemaUpgrade",
    "STORE_VARIABLE",
    "Assignment",
    "BestValidation",
    "DetachReport",
    "FolderOwnedError",
    "NothingToDetachError",
    "StoreCopyError",
    "StoreCopyRefusedError",
    "CheckpointRecord",
    "CopyReport",
    "ExperimentBusyError",
    "NoStoreError",
    "StoreUnusableError",
    "StoreUpgradeNeededError",
    "ExperimentRecord",
    "ExperimentStore",
    "StoreFullError",
    "StoreLockedError",
    "StoreUnavailableError",
    "JobRecord",
    "LogKind",
    "LogOwner",
    "LogPart",
    "LogWriter",
    "MetricKind",
    "MetricRecord",
    "NewTrial",
    "RestartRecord",
    "SearchState",
    "State",
    "StoreError",
    "StoreLocation",
    "StoreRecorder",
    "TableCopied",
    "TrialRecord",
    "TrialRunRecord",
    "UnknownIdError",
    "copy_store",
    "damaged_store_error",
    "default_store_path",
    "folder_owner",
    "parse_store_location",
    "store_location",
    "launcher_alive",
    "launcher_columns",
    "session_start",
    "to_json_value",
    "trial_checkpoint_dir",
]
