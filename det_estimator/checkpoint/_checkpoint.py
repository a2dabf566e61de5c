"""A sealed checkpoint on disk, and reading one from any directory."""

import os
import pathlib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from det_estimator.checkpoint import _manifest, _metadata


@dataclass(frozen=True)
class Checkpoint:
    """A sealed checkpoint: a directory with the caller's files and a ``metadata.json``.

    Two checkpoints are equal when they have the same uuid and path; the metadata is
    left out of comparisons and hashing, so checkpoints can be kept in sets.

    Attributes:
        uuid: The checkpoint's id, also the name of its directory in its trial's directory.
        path: The checkpoint directory.
        metadata: The parsed ``metadata.json``: the caller's entries plus ``uuid``,
            ``format_version``, ``created`` (ISO 8601, UTC) and the ``files`` manifest.
    """

    uuid: str
    path: pathlib.Path
    metadata: Mapping[str, Any] = field(compare=False, repr=False)

    @property
    def steps_completed(self) -> int:
        """The number of batches trained when the checkpoint was written."""
        return self.metadata[_metadata.STEPS_COMPLETED]

    @property
    def created(self) -> str:
        """When the checkpoint was sealed, as an ISO 8601 string in UTC."""
        return self.metadata["created"]

    @property
    def validation_metrics(self) -> Mapping[str, Any]:
        """The metrics recorded for this checkpoint; empty if it was never validated."""
        return types.MappingProxyType(self.metadata.get(_metadata.VALIDATION_METRICS, {}))

    def verify(self, checksums: bool = True) -> list[str]:
        """Checks the checkpoint on disk against its manifest.

        ``metadata.json`` is read again, so the result reflects the disk now. Every
        file in the manifest must exist with its recorded size and sha256, and no
        other file may be present (``metadata.json`` aside).

        Args:
            checksums: Also compare every file's sha256 (reading every file); without,
                the check reads no file, only their sizes.

        Returns:
            One line per problem, e.g. ``model/model.ckpt-5.index: sha256 mismatch (...)``
            or ``metadata.json is missing``; an empty list when the checkpoint is intact.
        """
        try:
            metadata = _metadata.load(self.path)
        except _metadata.InvalidCheckpointError as error:
            return [error.problem]
        return _manifest.check_manifest(self.path, metadata["files"], checksums)


def checkpoint_from_metadata(path: pathlib.Path, metadata: dict[str, Any]) -> Checkpoint:
    """Wraps already-checked metadata into a :class:`Checkpoint` with read-only metadata.

    Args:
        path: The checkpoint directory.
        metadata: Its parsed metadata.

    Returns:
        The checkpoint.
    """
    return Checkpoint(uuid=metadata["uuid"], path=path, metadata=types.MappingProxyType(metadata))


def read_checkpoint(path: Union[str, os.PathLike]) -> Checkpoint:
    """Loads the checkpoint in a directory, for instance one copied out of a trial.

    Only ``metadata.json`` is read; call :meth:`Checkpoint.verify` to check the files.

    Args:
        path: The checkpoint directory.

    Returns:
        The checkpoint.

    Raises:
        ValueError: Naming the path, if it has no ``metadata.json`` or the file is not
            valid checkpoint metadata.
    """
    directory = pathlib.Path(path)
    if not directory.is_dir():
        raise ValueError(f"{directory} is not a checkpoint: it is not a directory")
    return checkpoint_from_metadata(directory, _metadata.load(directory))
