"""Whether a checkpoint storage directory can hold checkpoints: checked before a run is recorded."""

import tempfile
from pathlib import Path

from det_estimator.errors import DetEstimatorError


class CheckpointStorageError(DetEstimatorError, ValueError):
    """The checkpoint storage cannot hold checkpoints; the message says why and what is expected."""


def check_checkpoint_storage(root: Path) -> None:
    """Refuses a checkpoint storage directory that is a file or cannot be created or written.

    Creates the directory when it is missing (as the first checkpoint would).

    Args:
        root: the directory checkpoints go to (``checkpoint_storage.host_path`` joined with
            ``storage_path``, relative ones resolved).

    Raises:
        CheckpointStorageError: ``root`` is a file, or this user cannot create it or write into it.
    """
    if root.exists() and not root.is_dir():
        raise CheckpointStorageError(
            f"checkpoint_storage.host_path {root} is a file. Expected a directory (it is created if missing) that "
            "this user can write."
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".det-estimator-probe-"):
            pass
    except OSError as error:
        raise CheckpointStorageError(
            f"checkpoint_storage.host_path {root} cannot hold checkpoints: {error.strerror or error}. Expected a "
            "directory this user can create and write (on a file system every host shares, with --hosts)."
        ) from None
