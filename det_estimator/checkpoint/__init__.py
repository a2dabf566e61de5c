"""Checkpoints of a trial on a file system: written atomically, verified by checksum.

Each checkpoint is a directory named by its uuid holding the caller's files (the
TensorFlow checkpoint under ``model/``, SavedModels under ``saved_models/<name>/``,
files written by RunHooks) and a ``metadata.json`` with the caller's entries, the
step count and a sha256 manifest of every file. This package only handles files;
it never imports TensorFlow.

Typical use::

    from det_estimator.checkpoint import TrialCheckpoints

    store = TrialCheckpoints("/shared/checkpoints/trial-1")
    store.remove_partials()
    with store.write({"steps_completed": 100}) as pending:
        write_model_files(pending.path)
    checkpoint = store.record_validation(pending.checkpoint, {"loss": 0.25})
    store.prune(save_latest=1, save_best=1, metric="loss", smaller_is_better=True)
    resume_from = store.latest_valid()
"""

from det_estimator.checkpoint._checkpoint import Checkpoint, read_checkpoint
from det_estimator.checkpoint._copy import CheckpointCopyError, CopiedCheckpoint, copy_checkpoint
from det_estimator.checkpoint._storage_check import CheckpointStorageError, check_checkpoint_storage
from det_estimator.checkpoint._store import PendingCheckpoint, TrialCheckpoints

__all__ = [
    "Checkpoint",
    "CheckpointCopyError",
    "CheckpointStorageError",
    "CopiedCheckpoint",
    "PendingCheckpoint",
    "TrialCheckpoints",
    "check_checkpoint_storage",
    "copy_checkpoint",
    "read_checkpoint",
]
