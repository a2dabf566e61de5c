"""CheckpointContext: writing, reading and deleting a trial's checkpoints; ``core_context.checkpoint``."""

import contextlib
import enum
import errno
import logging
import numbers
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, Optional, Union

from det_estimator import _heartbeat
from det_estimator.checkpoint import Checkpoint, TrialCheckpoints, read_checkpoint
from det_estimator.core._distributed import DistributedContext
from det_estimator.core._store import CoreStore
from det_estimator.core._train import plain_number
from det_estimator.errors import DetEstimatorError
from det_estimator.lifecycle import RetentionPolicy
from det_estimator.store import StoreRecorder, UnknownIdError

logger = logging.getLogger("det_estimator.core")

STEPS_COMPLETED = "steps_completed"
# The reference's defaults: the trial's latest checkpoint and its best.
_KEEP_LATEST_AND_BEST = RetentionPolicy()


class DownloadMode(enum.Enum):
    """How processes of one machine share a checkpoint they read.

    Checkpoints live on a file system every process sees, so nothing is downloaded and
    both modes read the checkpoint in place; the enum exists for compatibility.
    """

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointError(DetEstimatorError, RuntimeError):
    """A checkpoint could not be written, found or read."""


# Why a checkpoint's storage refuses it: full (its disk, its quota), or mounted read-only since.
_STORAGE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _storage_failure(error: BaseException) -> Optional[int]:
    """The errno of ``_STORAGE_FAILURES`` that ``error`` is, or quotes; None for any other error.

    An OSError, or what wraps one: shutil.Error lists its files' errors, and TensorFlow's
    savers raise errors of their own that quote the OS's message. A failure to clean up
    the partial files, on a file system turned read-only, is chained to the first one.
    """
    link: Optional[BaseException] = error
    while link is not None:
        number = getattr(link, "errno", None)
        if number in _STORAGE_FAILURES:
            return number
        for candidate in _STORAGE_FAILURES:
            if os.strerror(candidate) in str(link):
                return candidate
        link = link.__context__
    return None


def merge_metadata(all_metadata: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """The processes' checkpoint metadata merged, and the keys they disagree on with the ranks that gave them.

    Dicts under the same key merge, key by key; any other value given by several
    processes must be the same everywhere. A key in conflict is named by its path from
    the top (``"shards/offset"``).
    """
    merged: dict[str, Any] = {}
    givers: dict[str, int] = {}
    conflicts: dict[str, list[int]] = {}

    def merge(into: dict[str, Any], theirs: dict[str, Any], rank: int, prefix: str) -> None:
        for key, value in theirs.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and isinstance(into.get(key, {}), dict):
                givers.setdefault(path, rank)
                merge(into.setdefault(key, {}), value, rank, f"{path}/")
            elif key not in into:
                into[key] = value
                givers[path] = rank
            elif into[key] != value:
                conflicts.setdefault(path, [givers.get(path, 0)]).append(rank)

    for rank, metadata in enumerate(all_metadata):
        merge(merged, metadata, rank, "")
    return merged, conflicts


class CheckpointContext:
    """A trial's checkpoints: ``core_context.checkpoint``.

    A checkpoint is a directory, sealed atomically with a sha256 of every file once it
    is written (a crash never leaves a half-written checkpoint that looks whole), and
    named by its ``storage_id`` (a uuid) in the trial's checkpoint directory on a file
    system every process sees. Each new checkpoint is recorded in the experiment store,
    and the retention policy of the config (``save_trial_latest``, ``save_trial_best``,
    ``save_experiment_best``) deletes the ones it does not keep.

    Args:
        distributed: this process's place in the job.
        checkpoint_dir: the trial's checkpoint directory.
        recorder: the chief's store recorder (None elsewhere, or off an experiment).
        retention: which checkpoints to keep.
        store: the experiment store, where checkpoints of other trials are found.
        before_seal: called by the chief just before it seals a checkpoint (a launched
            run ends its process there if its launcher is gone).
    """

    def __init__(
        self,
        distributed: DistributedContext,
        checkpoint_dir: Union[str, Path],
        recorder: Optional[StoreRecorder] = None,
        retention: RetentionPolicy = _KEEP_LATEST_AND_BEST,
        store: Optional[CoreStore] = None,
        before_seal: Callable[[], None] = lambda: None,
    ) -> None:
        self._distributed = distributed
        self._before_seal = before_seal
        self._checkpoints = TrialCheckpoints(checkpoint_dir)
        self._recorder = recorder if distributed.rank == 0 else None
        self._retention = retention
        self._store = store
        self._validations: dict[int, dict[str, Any]] = {}
        self._written: dict[int, Checkpoint] = {}

    @property
    def directory(self) -> Path:
        """The trial's checkpoint directory."""
        return self._checkpoints.directory

    @contextlib.contextmanager
    def store_path(
        self, metadata: Optional[dict[str, Any]] = None, *, shard: bool = False
    ) -> Iterator[tuple[Path, str]]:
        """Yields ``(path, storage_id)``: a directory to write a checkpoint into, sealed when the block ends.

        Write every file of the checkpoint into ``path``. When the block ends without an
        exception the checkpoint is sealed (hashed, fsynced and renamed into place) and
        recorded; if it raises, nothing is kept. ``path`` is a temporary name: after the
        block the checkpoint is at ``<checkpoint directory>/<storage_id>``.

        Args:
            metadata: JSON values stored in the checkpoint's ``metadata.json``; must hold
                ``steps_completed``, the batches trained so far.
            shard: False: only the chief calls it. True: every process calls it at the
                same time, each writing its own files into the same directory; the
                checkpoint's metadata is every process's ``metadata``, merged.

        Example:
            ::

                if core_context.distributed.rank == 0:
                    with core_context.checkpoint.store_path({"steps_completed": step}) as (path, storage_id):
                        save_my_model(path / "model.npz")

        Raises:
            ValueError: ``steps_completed`` is missing from ``metadata``.
            CheckpointError: ``shard=False`` on another process than the chief, or with
                ``shard=True`` processes whose ``metadata`` give one key different values
                (on every process; nothing is kept).
        """
        metadata = dict(metadata or {})
        if isinstance(metadata.get(STEPS_COMPLETED), numbers.Integral):  # a NumPy int too
            metadata[STEPS_COMPLETED] = plain_number(metadata[STEPS_COMPLETED])
        if not isinstance(metadata.get(STEPS_COMPLETED), int) or isinstance(metadata[STEPS_COMPLETED], bool):
            raise ValueError(
                f"Checkpoint metadata must hold `{STEPS_COMPLETED}`, the batches trained so far, as an int. "
                f"Received: {metadata!r}"
            )
        steps = metadata[STEPS_COMPLETED]
        if steps in self._validations and "validation_metrics" not in metadata:
            metadata["validation_metrics"] = self._validations[steps]
        # A checkpoint's start and end are progress: a large one takes its time in between.
        _heartbeat.beat()
        if not shard:
            if self._distributed.rank != 0:
                raise CheckpointError(
                    f"store_path(shard=False) is for the chief only; process {self._distributed.rank} called it. "
                    "Call it under `if core_context.distributed.rank == 0:`, or pass shard=True on every process."
                )
            with self._out_of_space_is_clear(), self._checkpoints.write(metadata) as pending:
                yield pending.path, pending.uuid
                self._before_seal()
            self._sealed(pending.checkpoint)
            _heartbeat.beat()
            return
        with self._out_of_space_is_clear():
            yield from self._store_sharded(metadata)
        _heartbeat.beat()

    @contextlib.contextmanager
    def _out_of_space_is_clear(self) -> Iterator[None]:
        """A checkpoint that does not fit, or whose storage turned read-only, raises a CheckpointError saying so."""
        try:
            yield
        except Exception as error:
            reason = _storage_failure(error)
            if reason is None:
                raise
            directory = self._checkpoints.directory
            if reason in (errno.ENOSPC, errno.EDQUOT):
                try:
                    free = f"{shutil.disk_usage(directory).free:,} bytes free there now"
                except OSError:
                    free = "its free space unknown"
                what, fix = f"{os.strerror(errno.ENOSPC)} ({free})", "Free space there"
            else:
                what, fix = os.strerror(reason), "Make it writable again"
            raise CheckpointError(
                f"A checkpoint could not be written into {directory}: {what}. The checkpoints written before it "
                f"stay valid. {fix}, or point checkpoint_storage.host_path at another file system, then resume "
                "the experiment."
            ) from error

    def _store_sharded(self, metadata: dict[str, Any]) -> Iterator[tuple[Path, str]]:
        writer = pending = None
        if self._distributed.rank == 0:
            writer = self._checkpoints.write(metadata)
            pending = writer.__enter__()
        path, storage_id = self._distributed.broadcast(None if pending is None else (str(pending.path), pending.uuid))
        failure: Optional[BaseException] = None
        try:
            yield Path(path), storage_id
        except BaseException as error:  # every process must reach the barrier below
            failure = error
        shares = self._distributed.allgather((failure is None, metadata))
        succeeded = [ok for ok, _ in shares]
        # Every process's metadata goes into the checkpoint, as the reference merges it; every
        # process finds the same conflicts in the same shares, and so raises or not with the others.
        merged, conflicts = merge_metadata([theirs for _, theirs in shares])
        if writer is not None and pending is not None:
            if all(succeeded) and not conflicts:
                pending.metadata.update(merged)
                self._before_seal()
                writer.__exit__(None, None, None)
                self._sealed(pending.checkpoint)
            else:
                writer.__exit__(CheckpointError, CheckpointError("a process failed"), None)
        if failure is not None:
            raise failure
        if not all(succeeded):
            failed = [rank for rank, ok in enumerate(succeeded) if not ok]
            raise CheckpointError(f"Processes {failed} failed to write their part of checkpoint {storage_id}.")
        if conflicts:
            listed = "; ".join(f"{key!r} from processes {ranks}" for key, ranks in sorted(conflicts.items()))
            raise CheckpointError(
                f"store_path(shard=True): the processes' metadata differ, so checkpoint {storage_id} was not kept: "
                f"{listed}. Give the processes' entries keys of their own, or the same values."
            )

    def _sealed(self, checkpoint: Checkpoint) -> None:
        """Records a sealed checkpoint, then deletes what retention does not keep."""
        self._written[checkpoint.steps_completed] = checkpoint
        if self._recorder is not None:
            self._recorder.on_checkpoint(
                checkpoint.uuid, checkpoint.steps_completed, str(checkpoint.path), dict(checkpoint.metadata)
            )
        self._prune()

    def _prune(self) -> None:
        """Deletes what retention does not keep while the experiment may still go on (see ``RetentionPolicy``).

        Once it completes, the run lifecycle applies the same policy over all its trials.
        """
        self._delete(self._retention.not_kept(self._checkpoints, self._experiment_best(), experiment_completed=False))

    def _experiment_best(self) -> set[str]:
        """The uuids of the experiment's ``save_experiment_best`` best checkpoints, over all its trials."""
        if self._recorder is None:
            return set()
        store = self._recorder.store
        return self._retention.experiment_best(store, store.trial(self._recorder.trial_id).experiment_id)

    def _on_validation(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Stores validation metrics in the checkpoint of the same step, now or when it is written."""
        self._validations = {steps_completed: metrics}
        checkpoint = self._written.get(steps_completed)
        if checkpoint is None or checkpoint.validation_metrics:
            return
        try:
            self._written[steps_completed] = self._checkpoints.record_validation(checkpoint, metrics)
        except (TypeError, ValueError) as error:
            logger.warning("validation metrics not stored in checkpoint %s: %s", checkpoint.uuid, error)
            return
        if self._recorder is not None:
            # metadata.json grew by the metrics: the recorded size follows the files.
            self._recorder.on_checkpoint_validation(checkpoint.uuid, str(checkpoint.path), metrics)
        self._prune()

    def upload(
        self, ckpt_dir: Optional[Union[str, Path]], metadata: Optional[dict[str, Any]] = None, *, shard: bool = False
    ) -> str:
        """Copies the contents of ``ckpt_dir`` into a new checkpoint; returns its ``storage_id``.

        Same rules as :meth:`store_path`. With ``shard=True`` a process with nothing to add
        passes ``ckpt_dir=None``; processes that pass the same directory upload it once,
        and no file may come from two different directories.

        Raises:
            CheckpointError: ``ckpt_dir=None`` without ``shard=True`` or on every process,
                or a file that two processes' directories both hold (on every process).
        """
        if not shard:
            if ckpt_dir is None:
                raise CheckpointError(
                    "upload(ckpt_dir=None, shard=False) would write an empty checkpoint: pass the directory to "
                    "upload, or shard=True on every process where some have nothing to add."
                )
            with self.store_path(metadata) as (path, storage_id):
                shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
            return storage_id
        source = None if ckpt_dir is None else Path(ckpt_dir)
        if source is not None and not source.is_dir():
            raise CheckpointError(f"upload(): ckpt_dir {str(source)!r} is not a directory.")
        identity = None if source is None else (source.stat().st_dev, source.stat().st_ino)
        files = (
            [] if source is None else sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
        )
        shares = self._distributed.allgather((identity, files))
        # Every process decides the same from the same shares, so they raise or copy together.
        uploaders: dict[Any, int] = {}
        for rank, (their_identity, _) in enumerate(shares):
            if their_identity is not None:
                uploaders.setdefault(their_identity, rank)  # a directory passed by several: its lowest rank copies it
        if not uploaders:
            raise CheckpointError(
                "upload(ckpt_dir=None, shard=True) on every process would write an empty checkpoint: "
                "at least one process must pass a directory."
            )
        ranks_of: dict[str, list[int]] = {}
        for rank in sorted(uploaders.values()):
            for name in shares[rank][1]:
                ranks_of.setdefault(name, []).append(rank)
        conflicts = {name: ranks for name, ranks in sorted(ranks_of.items()) if len(ranks) > 1}
        if conflicts:
            listed = "; ".join(f"{name!r} from processes {ranks}" for name, ranks in conflicts.items())
            raise CheckpointError(
                f"upload(shard=True) refuses files that several processes' directories hold, as one would "
                f"overwrite the other: {listed}. Give each process's files names of their own."
            )
        copies = source is not None and uploaders[identity] == self._distributed.rank
        with self.store_path(metadata, shard=True) as (path, storage_id):
            if copies and source is not None:
                shutil.copytree(source, path, dirs_exist_ok=True)
        return storage_id

    def download(
        self,
        storage_id: str,
        ckpt_dir: Union[str, Path],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Optional[Callable[[str], bool]] = None,
    ) -> None:
        """Copies a checkpoint's files into ``ckpt_dir`` (created if missing).

        ``selector``, given a file's path relative to the checkpoint, says whether to copy it.
        """
        source = self._locate(storage_id)
        destination = Path(ckpt_dir)
        for file in sorted(path for path in source.rglob("*") if path.is_file()):
            relative = file.relative_to(source).as_posix()
            if selector is None or selector(relative):
                (destination / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, destination / relative)

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Optional[Callable[[str], bool]] = None,
    ) -> Iterator[Path]:
        """Yields the directory of checkpoint ``storage_id``, to read it (do not write into it).

        The checkpoint may belong to this trial or to any trial of the experiment store.
        It is read in place, so ``selector`` (which files the reference system downloads)
        is accepted and changes nothing: every file is there.

        Raises:
            CheckpointError: no checkpoint has that id.
        """
        yield self._locate(storage_id)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The checkpoint's metadata: what was given to :meth:`store_path`, plus its uuid, time and files."""
        return dict(read_checkpoint(self._locate(storage_id)).metadata)

    def delete(self, storage_ids: Union[str, list[str]]) -> None:
        """Deletes checkpoints of this trial (chief only); the store marks them deleted.

        Args:
            storage_ids: one storage id, as the reference system's ``delete(storage_id)``
                takes, or a list of them.

        Raises:
            TypeError: ``storage_ids`` is neither a storage id nor a list of them.
            CheckpointError: no checkpoint has one of the ids, or another process than
                the chief called it.
        """
        # A single id must not be taken for a sequence: its characters are no checkpoints.
        if isinstance(storage_ids, str):
            storage_ids = [storage_ids]
        if not isinstance(storage_ids, (list, tuple)) or not all(isinstance(one, str) for one in storage_ids):
            raise TypeError(
                f"checkpoint.delete() takes a storage id (str) or a list of them. Received: {storage_ids!r}"
            )
        if self._distributed.rank != 0:
            # Only the chief records in the store: elsewhere the files would go and the store
            # would still list the checkpoint as kept.
            raise CheckpointError(
                f"checkpoint.delete() is for the chief only; process {self._distributed.rank} called it. "
                "Call it under `if core_context.distributed.rank == 0:`."
            )
        doomed = [read_checkpoint(self._locate(storage_id)) for storage_id in storage_ids]
        self._delete(doomed)

    def _delete(self, doomed: list[Checkpoint]) -> None:
        """Marks checkpoints deleted in the store, then deletes their files.

        In this order, a store that cannot be written (its disk full, say) leaves the
        files in place, rather than listing as kept checkpoints that are gone.
        """
        if doomed and self._recorder is not None:
            self._recorder.on_checkpoints_deleted([checkpoint.uuid for checkpoint in doomed])
        for checkpoint in doomed:
            self._checkpoints.delete(checkpoint)
            # A validation of its step later must not look for it.
            if self._written.get(checkpoint.steps_completed, checkpoint).uuid == checkpoint.uuid:
                self._written.pop(checkpoint.steps_completed, None)

    def _locate(self, storage_id: str) -> Path:
        own = self._checkpoints.directory / storage_id
        if own.is_dir():
            return own
        if self._store is not None:
            with contextlib.suppress(UnknownIdError):
                path = Path(self._store.checkpoint(storage_id).path)
                if path.is_dir():
                    return path
        raise CheckpointError(
            f"There is no checkpoint {storage_id!r} in {self._checkpoints.directory}"
            + (f" or in the store {self._store.location}" if self._store is not None else "")
            + ": it was deleted by retention, or the id is wrong."
        )
