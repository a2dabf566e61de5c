"""Copying a sealed checkpoint into a directory of its own: checked against its manifest, complete or absent.

The files are copied into a hidden sibling of the destination, each hashed as it is
copied and compared with the manifest, then made durable; the sibling is renamed to
the destination only once every file matched. A checkpoint whose files are missing,
changed or joined by others is refused, and a copy that fails or is interrupted
leaves no directory that looks complete. A copy killed outright leaves its hidden
``.<name>.copy-<pid>-<hex>`` sibling behind: the next copy to the same destination
removes it, once the process named in it is gone.
"""

import hashlib
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from det_estimator._pids import process_exists
from det_estimator.checkpoint import _fs, _manifest, _metadata
from det_estimator.checkpoint._checkpoint import Checkpoint, checkpoint_from_metadata
from det_estimator.errors import DetEstimatorError

_CHUNK_BYTES = 1 << 20
# The hidden sibling a copy is made in: the destination's name, and the copying process.
_STAGING = re.compile(r"^\.(?P<name>.+)\.copy-(?P<pid>\d+)-[0-9a-f]{32}$")


class CheckpointCopyError(DetEstimatorError, ValueError):
    """A checkpoint that cannot be copied as it was sealed, or a destination that would lose files.

    Attributes:
        problems: one line per file that is wrong (empty when the destination is the problem).
    """

    def __init__(self, message: str, problems: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


@dataclass(frozen=True)
class CopiedCheckpoint:
    """A checkpoint copied by :func:`copy_checkpoint`.

    Attributes:
        checkpoint: the copy, read back from its destination.
        files: how many files were copied, ``metadata.json`` included.
        size_bytes: their bytes.
    """

    checkpoint: Checkpoint
    files: int
    size_bytes: int


def copy_checkpoint(source: Path, destination: Path) -> CopiedCheckpoint:
    """Copies the sealed checkpoint at ``source`` to ``destination``, checking every file's sha256 and size.

    Args:
        source: the checkpoint's directory (holding ``metadata.json``).
        destination: a directory that does not exist, or is empty; its parents are made.

    Returns:
        The copy.

    Raises:
        CheckpointCopyError: ``source`` is no readable checkpoint, one of its files is
            missing, changed or not in its manifest, or ``destination`` exists and is
            not an empty directory. Nothing is left at ``destination`` then.
        OSError: a file cannot be read or written (the disk is full, say); nothing is
            left at ``destination`` either.
    """
    source, destination = Path(os.path.abspath(source)), Path(os.path.abspath(destination))
    metadata, metadata_bytes = _read_metadata(source)
    _check_destination(source, destination)
    manifest: _manifest.Manifest = metadata["files"]
    not_as_sealed = f"{source} does not hold the files it was sealed with."
    problems = _manifest.check_manifest(source, manifest, checksums=False)  # reads no file: before any is copied
    if problems:
        raise CheckpointCopyError(not_as_sealed, problems)
    made = _fs.outermost_missing(destination.parent)
    _remove_abandoned_copies(destination)
    staging = destination.parent / f".{destination.name}.copy-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as error:
        _fs.remove_empty_folders(destination.parent, made)
        raise CheckpointCopyError(
            f"Cannot write into {destination.parent}: {error.strerror or error}. Name a directory in a folder this "
            "user can create or write."
        ) from None
    try:
        problems = [problem for name in sorted(manifest) if (problem := _copy_file(source, staging, name, manifest))]
        if problems:
            raise CheckpointCopyError(not_as_sealed, problems)
        _fs.atomic_write(staging / _metadata.METADATA_FILE, metadata_bytes)
        for directory in _fs.list_directories(staging):
            _fs.fsync_directory(directory)
        _publish(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _fs.remove_empty_folders(destination.parent, made)
        raise
    _fs.fsync_directory(destination.parent)
    copied = checkpoint_from_metadata(destination, _metadata.load(destination))
    size = sum(entry["size"] for entry in manifest.values()) + len(metadata_bytes)
    return CopiedCheckpoint(copied, len(manifest) + 1, size)


def _read_metadata(source: Path) -> tuple[dict[str, Any], bytes]:
    """The checkpoint's metadata, and the bytes of its ``metadata.json`` that the copy gets."""
    if not source.is_dir():
        raise CheckpointCopyError(f"There is no checkpoint directory at {source}: its files are gone.")
    try:
        data = (source / _metadata.METADATA_FILE).read_bytes()
    except OSError as error:
        raise CheckpointCopyError(
            f"{source} is not a sealed checkpoint: its {_metadata.METADATA_FILE} cannot be read "
            f"({error.strerror or error})."
        ) from None
    try:
        return _metadata.parse(source, data), data
    except _metadata.InvalidCheckpointError as error:
        raise CheckpointCopyError(str(error)) from None


def _check_destination(source: Path, destination: Path) -> None:
    """Refuses a destination that is a file, a directory that holds anything, or one that would lose its place.

    An empty directory is replaced by the copy, renamed over it: the current directory
    would leave the shell that named it in a removed one, and one inside the checkpoint
    would add files to it.
    """
    expected = "Name a directory that does not exist yet (it is made), or an empty one"
    if destination == source or source in destination.parents:
        raise CheckpointCopyError(f"{destination} is inside the checkpoint. {expected}, outside it.")
    if destination.is_dir():
        if next(destination.iterdir(), None) is not None:
            raise CheckpointCopyError(f"{destination} exists and is not empty. {expected}.")
        if destination == Path.cwd():
            raise CheckpointCopyError(
                f"{destination} is the current directory, which the copy would replace. {expected}, such as "
                f"{destination / source.name}."
            )
    elif destination.exists() or destination.is_symlink():
        raise CheckpointCopyError(f"{destination} is a file. {expected}.")
    else:
        above = next(folder for folder in destination.parents if folder.exists())
        if not above.is_dir():
            raise CheckpointCopyError(f"{above} is a file: {destination} cannot be made under it. {expected}.")


def _copy_file(source: Path, staging: Path, name: str, manifest: _manifest.Manifest) -> str:
    """Copies one file of the manifest, hashing what it copies; returns what is wrong with it, or ""."""
    if not (source / name).is_file():  # gone since the check before the copy
        return f"{name}: missing" if not (source / name).exists() else f"{name}: missing (not a regular file)"
    expected = manifest[name]
    target = staging / name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with open(source / name, "rb") as reader, open(target, "xb") as writer:
        while chunk := reader.read(_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            writer.write(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    shutil.copystat(source / name, target)
    if size != expected["size"]:
        return f"{name}: size mismatch (expected {expected['size']} bytes, found {size})"
    if digest.hexdigest() != expected["sha256"]:
        return f"{name}: sha256 mismatch (expected {expected['sha256']}, found {digest.hexdigest()})"
    return ""


def _remove_abandoned_copies(destination: Path) -> list[Path]:
    """Removes the hidden copies to ``destination`` that killed processes left; returns them.

    A copy whose process still runs (another download to the same place) is left alone.
    """
    removed: list[Path] = []
    if not destination.parent.is_dir():
        return removed
    for entry in os.scandir(destination.parent):
        match = _STAGING.match(entry.name)
        if match and match["name"] == destination.name and not process_exists(int(match["pid"])):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _publish(staging: Path, destination: Path) -> None:
    """Renames the complete copy to ``destination``, which may be an empty directory (it is replaced)."""
    try:
        os.rename(staging, destination)
    except OSError as error:
        if destination.exists():  # filled, or made a file, while the files were copied
            raise CheckpointCopyError(
                f"{destination} was filled while the checkpoint was copied ({error.strerror or error}). Name a "
                "directory that does not exist yet, or an empty one."
            ) from None
        raise
