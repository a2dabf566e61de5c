"""Durable file-system primitives: fsync, atomic replacement, listing and hashing files.

A rename is atomic but not durable until the directory that holds the entry is
fsynced, and a file's contents are not durable until the file itself is. Every
function here that makes something visible does both, so that after a power loss
a reader sees either the old state or the complete new one.
"""

import errno
import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Optional

_CHUNK_BYTES = 1 << 20

# Some file systems (several network and FUSE ones) cannot fsync a directory; a
# rename there is still atomic, only its durability is up to the server.
_DIRECTORY_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}

_TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{32}\.tmp")


def fsync_directory(path: os.PathLike) -> None:
    """Makes the entries of a directory (creations, renames, deletions) durable.

    Args:
        path: The directory.

    Raises:
        OSError: If the directory cannot be opened or fsynced, except on file
            systems that do not support fsyncing a directory.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in _DIRECTORY_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def temporary_name(name: str) -> str:
    """The name of the temporary file that :func:`atomic_write` uses to replace ``name``.

    Args:
        name: The file name to be replaced.

    Returns:
        A hidden, unique name such as ``.metadata.json.<32 hex digits>.tmp``.
    """
    return f".{name}.{uuid.uuid4().hex}.tmp"


def is_temporary_name(candidate: str, name: str) -> bool:
    """Whether ``candidate`` is a temporary file that :func:`atomic_write` made for ``name``.

    Args:
        candidate: A file name found on disk.
        name: The file name that was being replaced.

    Returns:
        True for names that :func:`temporary_name` returns for ``name``.
    """
    match = _TEMPORARY_NAME.fullmatch(candidate)
    return match is not None and match.group("name") == name


def atomic_write(path: Path, data: bytes) -> None:
    """Replaces the file at ``path`` with ``data``, atomically and durably.

    The bytes go to a temporary file in the same directory, which is fsynced and
    then renamed over ``path``; a crash leaves either the old file or the new one,
    plus at worst a temporary file that :func:`is_temporary_name` recognizes.

    Args:
        path: The file to write.
        data: Its new contents.

    Raises:
        OSError: If writing fails; ``path`` is then unchanged.
    """
    temporary = path.parent / temporary_name(path.name)
    try:
        with open(temporary, "xb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def list_files(root: Path) -> list[str]:
    """Lists every file under ``root``, recursively.

    Symbolic links to files count as files; symbolic links to directories are
    not followed, so the listing stays inside ``root``.

    Args:
        root: The directory to list.

    Returns:
        Paths relative to ``root`` with ``/`` separators, sorted.
    """
    found: list[str] = []
    for directory, _, names in os.walk(root):
        relative = Path(directory).relative_to(root)
        found.extend((relative / name).as_posix() for name in names)
    return sorted(found)


def list_directories(root: Path) -> list[Path]:
    """Lists ``root`` and every directory under it, deepest first.

    Args:
        root: The directory to list.

    Returns:
        The directories, children before their parents, so fsyncing them in this
        order makes each entry durable before the entry that leads to it.
    """
    return [Path(directory) for directory, _, _ in os.walk(root, topdown=False)]


def hash_file(path: Path, fsync: bool = False) -> tuple[str, int]:
    """Computes a file's sha256 and size, reading it in 1 MiB chunks.

    Args:
        path: The file.
        fsync: Also flush the file's contents to disk, in the same pass, for files
            that another writer may not have fsynced.

    Returns:
        The hex digest and the number of bytes.

    Raises:
        OSError: If the file cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(_CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as stream:
        while True:
            count = stream.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            size += count
        if fsync:
            os.fsync(stream.fileno())
    return digest.hexdigest(), size


def outermost_missing(path: Path) -> Optional[Path]:
    """The outermost folder of ``path`` that does not exist yet; None when ``path`` exists."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def remove_empty_folders(path: Path, up_to: Optional[Path]) -> None:
    """Removes ``path`` and its parents up to ``up_to`` while empty: the folders a refused or failed command made.

    ``up_to`` is what :func:`outermost_missing` returned before the folders were made;
    None removes nothing.
    """
    if up_to is None:
        return
    for folder in (path, *path.parents):
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == up_to:
            return
