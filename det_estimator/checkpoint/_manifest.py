"""The ``files`` manifest of a checkpoint: the sha256 and size of every file it holds.

The manifest covers every file except ``metadata.json`` itself, which is rewritten
when validation metrics arrive after the checkpoint was sealed.
"""

from pathlib import Path
from typing import Any

from det_estimator.checkpoint import _fs
from det_estimator.checkpoint._metadata import METADATA_FILE

Manifest = dict[str, dict[str, Any]]


def build_manifest(root: Path) -> Manifest:
    """Hashes every file under a checkpoint directory and makes all of them durable.

    The files were written by other code (TensorFlow, RunHooks) that may not have
    fsynced them, so each one is fsynced in the same pass that hashes it, and then
    every directory, so that the checkpoint is complete on disk before it is sealed.

    Args:
        root: The checkpoint directory, without ``metadata.json`` yet.

    Returns:
        Relative path (``/``-separated, sorted) to ``{"sha256": ..., "size": ...}``.

    Raises:
        ValueError: If the directory already holds a top-level ``metadata.json``.
        OSError: If a file cannot be read.
    """
    names = _fs.list_files(root)
    if METADATA_FILE in names:
        raise ValueError(
            f"{root / METADATA_FILE}: a checkpoint's top-level {METADATA_FILE} is written by det-estimator; "
            "store your own metadata under another name or pass it in the checkpoint's metadata."
        )
    manifest: Manifest = {}
    for name in names:
        sha256, size = _fs.hash_file(root / name, fsync=True)
        manifest[name] = {"sha256": sha256, "size": size}
    for directory in _fs.list_directories(root):
        _fs.fsync_directory(directory)
    return manifest


def check_manifest(root: Path, manifest: Manifest, checksums: bool = True) -> list[str]:
    """Compares a checkpoint directory with its manifest.

    Args:
        root: The checkpoint directory.
        manifest: Its ``files`` manifest, already checked for shape.
        checksums: Also read every file to compare its sha256; without, only that each
            is there with its size (which reads no file).

    Returns:
        One line per problem, each starting with the file's relative path, e.g.
        ``model/model.ckpt-5.index: sha256 mismatch``; empty when everything matches.
        Files that are on disk but not in the manifest are reported too: they were
        added after the checkpoint was sealed, so its contents are not what was saved.
    """
    problems = []
    for name, expected in manifest.items():
        problem = _check_file(root / name, expected, checksums)
        if problem:
            problems.append(f"{name}: {problem}")
    for name in _fs.list_files(root):
        if name not in manifest and not _is_metadata_file(name):
            problems.append(f"{name}: not in the manifest (added after the checkpoint was sealed)")
    return problems


def _check_file(path: Path, expected: dict[str, Any], checksum: bool) -> str:
    """Returns what is wrong with one file, or "" when its size (and sha256, with ``checksum``) match."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return f"cannot be read ({error})"
    if not path.is_file():
        return "missing (not a regular file)"
    # The size is free to check and explains truncation better than a hash mismatch.
    if size != expected["size"]:
        return f"size mismatch (expected {expected['size']} bytes, found {size})"
    if not checksum:
        return ""
    try:
        sha256, _ = _fs.hash_file(path)
    except OSError as error:
        return f"cannot be read ({error})"
    if sha256 != expected["sha256"]:
        return f"sha256 mismatch (expected {expected['sha256']}, found {sha256})"
    return ""


def _is_metadata_file(name: str) -> bool:
    """Whether a file is ``metadata.json`` or a temporary left by an interrupted rewrite of it."""
    return name == METADATA_FILE or _fs.is_temporary_name(name, METADATA_FILE)
