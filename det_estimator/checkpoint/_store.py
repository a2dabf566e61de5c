"""The checkpoints of one trial in a directory of a file system.

Layout of the trial's directory::

    <directory>/
        <uuid>/                 a sealed checkpoint: the caller's files and metadata.json
        .partial-<uuid>/        a checkpoint being written (or left by a crashed write)
        .deleting-<uuid>-<hex>/ a checkpoint being deleted (or left by a crashed delete)

A checkpoint is written under a hidden name and renamed to its uuid only once
every file and its ``metadata.json`` are on disk, and is renamed back to a hidden
name before it is deleted. A crash at any moment therefore never leaves a visible
directory that is incomplete; every name starting with ``.`` is ignored by readers.
"""

import builtins
import contextlib
import datetime
import logging
import os
import shutil
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator.checkpoint import _fs, _manifest, _metadata, _retention
from det_estimator.checkpoint._checkpoint import Checkpoint, checkpoint_from_metadata

logger = logging.getLogger(__name__)

PARTIAL_PREFIX = ".partial-"
DELETING_PREFIX = ".deleting-"
CORRUPT_PREFIX = ".corrupt-"


class PendingCheckpoint:
    """A checkpoint being written inside :meth:`TrialCheckpoints.write`.

    Attributes:
        uuid: The uuid the checkpoint will have once sealed.
        path: The temporary directory to write the checkpoint's files into.
        metadata: A copy of the metadata given to ``write``; entries added here
            before the with-block ends are stored too.
    """

    def __init__(self, checkpoint_uuid: str, path: Path, metadata: dict[str, Any]):
        self.uuid = checkpoint_uuid
        self.path = path
        self.metadata = metadata
        self._sealed: Optional[Checkpoint] = None

    @property
    def checkpoint(self) -> Checkpoint:
        """The sealed checkpoint, available once the with-block has exited normally.

        Raises:
            RuntimeError: If read inside the with-block, or after it raised.
        """
        if self._sealed is None:
            raise RuntimeError(
                f"Checkpoint {self.uuid} is not sealed: it is sealed when the `with TrialCheckpoints.write(...)` "
                "block exits without an exception; read `.checkpoint` after the block."
            )
        return self._sealed


class TrialCheckpoints:
    """The checkpoints of one trial, each a sub-directory of ``directory`` named by its uuid.

    Only one process (the chief) may write, delete or prune at a time; any number
    may read. Typical use::

        store = TrialCheckpoints(trial_dir)
        store.remove_partials()  # at start-up, before any write
        with store.write({"steps_completed": 500, "hparams": hparams}) as pending:
            saver.save(session, str(pending.path / "model" / "model.ckpt"))
        checkpoint = pending.checkpoint
        ...
        resume_from = store.latest_valid()

    Args:
        directory: The trial's checkpoint directory; created if missing.
    """

    def __init__(self, directory: Union[str, os.PathLike]):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"TrialCheckpoints({str(self.directory)!r})"

    @contextlib.contextmanager
    def write(self, metadata: dict[str, Any]) -> Iterator[PendingCheckpoint]:
        """Writes a new checkpoint: the caller fills a temporary directory, which is then sealed.

        When the with-block exits normally, every file is hashed and fsynced, the
        ``metadata.json`` is written (the caller's metadata plus ``uuid``,
        ``format_version``, ``created`` and the ``files`` manifest), and the directory
        is renamed to ``directory/<uuid>``. If the block raises, the temporary
        directory is removed and the exception propagates. If the process dies, the
        temporary directory stays hidden until :meth:`remove_partials`.

        Args:
            metadata: JSON-serializable entries, including ``steps_completed`` (int).

        Yields:
            The pending checkpoint; after the block, ``pending.checkpoint`` is the sealed one.

        Raises:
            ValueError: If ``steps_completed`` is missing or not an int, a reserved key
                (``uuid``, ``format_version``, ``created``, ``files``) is set, or the caller
                wrote a top-level ``metadata.json``.
            TypeError: If a metadata value is not JSON; the message names its key.
        """
        _metadata.check_caller_metadata(metadata)
        checkpoint_uuid = uuid.uuid4().hex
        temporary = self.directory / f"{PARTIAL_PREFIX}{checkpoint_uuid}"
        temporary.mkdir()
        pending = PendingCheckpoint(checkpoint_uuid, temporary, _copy_json(metadata))
        try:
            yield pending
            pending._sealed = self._seal(pending)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise

    def _seal(self, pending: PendingCheckpoint) -> Checkpoint:
        """Hashes and fsyncs the pending files, writes metadata.json, and renames the directory into place."""
        # Entries added through pending.metadata have not been checked yet.
        _metadata.check_caller_metadata(pending.metadata)
        files = _manifest.build_manifest(pending.path)
        created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
        metadata = {"uuid": pending.uuid, "format_version": _metadata.FORMAT_VERSION, "created": created}
        metadata.update(pending.metadata)
        metadata["files"] = files
        _fs.atomic_write(pending.path / _metadata.METADATA_FILE, _metadata.encode(metadata))
        final = self.directory / pending.uuid
        # A rename within one file system is atomic: readers see no directory or a complete one.
        os.rename(pending.path, final)
        _fs.fsync_directory(self.directory)
        return checkpoint_from_metadata(final, _copy_json(metadata))

    # Annotations below this method spell `builtins.list`: in the class body, `list` is this method.
    def list(self) -> list[Checkpoint]:
        """Lists the sealed checkpoints whose ``metadata.json`` can be read, oldest first.

        Checkpoints are ordered by ``steps_completed``, then by creation time. Their
        files are not checked (see :meth:`latest_valid`); directories with an unreadable
        ``metadata.json`` are left out, and are never pruned.

        Returns:
            The checkpoints.
        """
        checkpoints, _ = self._scan()
        return checkpoints

    def _scan(self) -> tuple[builtins.list[Checkpoint], builtins.list[_metadata.InvalidCheckpointError]]:
        """Reads every visible sub-directory: the readable checkpoints, sorted, and the errors of the others."""
        checkpoints, errors = [], []
        for entry in sorted(os.scandir(self.directory), key=lambda item: item.name):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            path = self.directory / entry.name
            try:
                checkpoints.append(checkpoint_from_metadata(path, _metadata.load(path)))
            except _metadata.InvalidCheckpointError as error:
                errors.append(error)
        checkpoints.sort(key=_retention.recency_key)
        return checkpoints, errors

    def latest_valid(self) -> Optional[Checkpoint]:
        """Finds the most recent checkpoint that is intact, verifying checksums.

        Checkpoints are tried from the most recent back; each one whose files do not
        match its manifest, and each directory whose ``metadata.json`` cannot be read,
        is skipped with a logged warning that names it and what is wrong.

        Returns:
            The most recent intact checkpoint, or None if there is none.
        """
        checkpoints, errors = self._scan()
        for error in errors:
            logger.warning("Skipping checkpoint: %s", error)
        for checkpoint in reversed(checkpoints):
            problems = checkpoint.verify()
            if not problems:
                return checkpoint
            logger.warning(
                "Skipping checkpoint %s (steps_completed=%d), falling back to an earlier one: %s",
                checkpoint.path,
                checkpoint.steps_completed,
                "; ".join(problems),
            )
        return None

    def record_validation(self, checkpoint: Checkpoint, metrics: dict[str, Any]) -> Checkpoint:
        """Stores validation metrics in a sealed checkpoint's metadata.

        ``metadata.json`` is read from disk and replaced atomically, with its
        ``validation_metrics`` entry set to ``metrics`` (replacing earlier ones). The
        manifest does not cover ``metadata.json``, so the checkpoint stays valid.

        Args:
            checkpoint: The checkpoint that was validated.
            metrics: Metric name to JSON value.

        Returns:
            The checkpoint with its updated metadata.

        Raises:
            TypeError: If ``metrics`` is not a dict of JSON values; the message names the key.
            ValueError: If the checkpoint's ``metadata.json`` cannot be read.
        """
        _metadata.check_validation_metrics(metrics)
        metadata = _metadata.load(checkpoint.path)
        metadata[_metadata.VALIDATION_METRICS] = _copy_json(metrics)
        _fs.atomic_write(checkpoint.path / _metadata.METADATA_FILE, _metadata.encode(metadata))
        return checkpoint_from_metadata(checkpoint.path, metadata)

    def delete(self, checkpoint: Checkpoint) -> None:
        """Deletes a checkpoint of this trial; does nothing if it is already gone.

        The directory is first renamed to a hidden name, so that a crash midway
        leaves nothing that looks like a checkpoint.

        Args:
            checkpoint: A checkpoint in this trial's directory.

        Raises:
            ValueError: If the checkpoint is not a sub-directory of this trial's directory.
        """
        try:
            hidden = self._hide(checkpoint, DELETING_PREFIX, f"-{uuid.uuid4().hex}", "delete")
        except FileNotFoundError:
            return
        shutil.rmtree(hidden)

    def quarantine(self, checkpoint: Checkpoint) -> Path:
        """Hides a checkpoint that failed verification, keeping its files for inspection.

        A quarantined checkpoint (``.corrupt-<uuid>``) is no longer listed, resumed from
        or counted by :meth:`prune`; otherwise a corrupt checkpoint could outrank, and
        get pruned in place of, the valid ones written after it.

        Args:
            checkpoint: A checkpoint in this trial's directory.

        Returns:
            Where its files now are.

        Raises:
            ValueError: If the checkpoint is not a sub-directory of this trial's directory.
        """
        return self._hide(checkpoint, CORRUPT_PREFIX, "", "move")

    def _hide(self, checkpoint: Checkpoint, prefix: str, suffix: str, action: str) -> Path:
        """Renames one of this trial's checkpoints to a hidden name, durably; returns the new path.

        Raises:
            ValueError: If the checkpoint is not a sub-directory of this trial's directory.
            FileNotFoundError: If it is already gone.
        """
        path = Path(checkpoint.path)
        if path.name.startswith(".") or path.parent.resolve() != self.directory.resolve():
            raise ValueError(f"Checkpoint {path} is not a checkpoint of {self.directory}; refusing to {action} it.")
        hidden = self.directory / f"{prefix}{path.name}{suffix}"
        os.rename(path, hidden)
        _fs.fsync_directory(self.directory)
        return hidden

    def remove_partials(self) -> builtins.list[Path]:
        """Removes what interrupted writes, deletions and metadata updates left behind.

        Call it only when no other process is writing to this trial, e.g. at start-up.

        Returns:
            The paths removed.
        """
        removed = []
        for entry in sorted(os.scandir(self.directory), key=lambda item: item.name):
            path = self.directory / entry.name
            if entry.name.startswith((PARTIAL_PREFIX, DELETING_PREFIX)) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
                removed.append(path)
            elif not entry.name.startswith(".") and entry.is_dir():
                removed.extend(_remove_metadata_temporaries(path))
        for path in removed:
            logger.info("Removed %s, left by an interrupted checkpoint operation", path)
        return removed

    def prune(
        self,
        save_latest: int,
        save_best: int,
        metric: Optional[str],
        smaller_is_better: bool = True,
        keep: Collection[str] = (),
    ) -> builtins.list[Checkpoint]:
        """Deletes the checkpoints that the retention policy does not keep.

        Same semantics as the ``save_trial_latest`` and ``save_trial_best`` keys of
        ``checkpoint_storage``: a checkpoint is kept if it is among the ``save_latest``
        most recent ones (by ``steps_completed``) or among the ``save_best`` best ones by
        ``validation_metrics[metric]``. The two sets may overlap: a checkpoint that is
        both among the latest and among the best fills a place in each, so with 1 and 1
        only that checkpoint is kept. Checkpoints without a numeric, non-NaN value for
        the metric are never among the best. With both counts 0 every checkpoint is
        deleted, as in the reference system; a trial that is still training should keep
        ``save_latest >= 1`` so that it can resume. Checksums are not verified here, and
        directories with unreadable metadata are left alone.

        Args:
            save_latest: How many of the most recent checkpoints to keep.
            save_best: How many of the best checkpoints to keep.
            metric: The searcher's metric; required when ``save_best > 0``.
            smaller_is_better: Whether a smaller metric value is better.
            keep: uuids of checkpoints to keep whatever the counts say (for instance the
                experiment's best, ``save_experiment_best``).

        Returns:
            The checkpoints deleted, oldest first.

        Raises:
            ValueError: If a count is negative, or ``save_best > 0`` without a metric.
        """
        doomed = self.to_prune(save_latest, save_best, metric, smaller_is_better, keep)
        for checkpoint in doomed:
            self.delete(checkpoint)
        return doomed

    def to_prune(
        self,
        save_latest: int,
        save_best: int,
        metric: Optional[str],
        smaller_is_better: bool = True,
        keep: Collection[str] = (),
    ) -> builtins.list[Checkpoint]:
        """The checkpoints :meth:`prune` would delete, oldest first, left in place; same arguments."""
        return _retention.select_to_delete(self.list(), save_latest, save_best, metric, smaller_is_better, keep)


def _remove_metadata_temporaries(checkpoint_path: Path) -> list[Path]:
    """Removes the temporary files an interrupted :meth:`TrialCheckpoints.record_validation` left."""
    removed = []
    for entry in os.scandir(checkpoint_path):
        if _fs.is_temporary_name(entry.name, _metadata.METADATA_FILE) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def _copy_json(value: Any) -> Any:
    """A deep copy of an already-checked JSON value, so that later changes by the caller do not leak in."""
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_json(item) for item in value]
    return value
