"""What ``store detach`` copies: the plan of a store made one of its own, and the copies of its folders.

The store itself changes in one transaction (``ExperimentStore.detach``), after the
folders here are copied: an interrupted detach leaves the store as it was.
"""

import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator.store._identity import OWNER_FILE, FolderOwner, folder_owner, write_folder_owner
from det_estimator.store._jobs import JobRecord
from det_estimator.store._logs import LOG_FILE_NAME
from det_estimator.store._records import ExperimentRecord, TrialRecord


def store_files_dir(path: Path) -> Path:
    """The folder of a store's own files (logs, TensorBoard event files), beside its database file."""
    return path.parent / f"{path.stem}-files"


@dataclass(frozen=True)
class DetachPlan:
    """What a detach copies, and where the paths the store records then point.

    Attributes:
        new_tags: the experiments that get copies of their checkpoint folders, with their new tag.
        folder_copies: each checkpoint folder copied, with where its copy goes.
        log_copies: each log folder copied (a copy's, from beside the original), with where its copy goes.
        moves: folders whose recorded paths move, with where (the log folders by the whole files folder).
        kept: checkpoint folders that stay, and record the store's new id.
    """

    new_tags: dict[int, str]
    folder_copies: dict[Path, Path]
    log_copies: dict[Path, Path]
    moves: dict[Path, Path]
    kept: tuple[Path, ...]

    def moved(self, path: str) -> str:
        """``path`` in the folder it is copied to, when it lies in a folder that moves; else as it is."""
        return moved_path(path, self.moves)


def moved_path(path: str, moves: Mapping[Path, Path]) -> str:
    """``path`` in the folder it is copied to, when it lies in a folder of ``moves``; else as it is."""
    for source, target in moves.items():
        if path and Path(path).is_relative_to(source):
            return str(target / Path(path).relative_to(source))
    return path


def log_folder_copies(
    source_files_dir: Path, target_files_dir: Path, experiment_ids: Iterable[int], job_ids: Iterable[int]
) -> dict[Path, Path]:
    """Each log folder of these experiments and jobs in one store's files folder, with where its copy goes in another's.

    A trial's output log and TensorBoard event files are under its experiment's folder,
    ``experiments/<id>``; a job's output log under ``jobs/<id>``.
    """
    logs = [Path("experiments") / str(experiment_id) for experiment_id in experiment_ids]
    logs += [Path("jobs") / str(job_id) for job_id in job_ids]
    return {source_files_dir / relative: target_files_dir / relative for relative in logs}


def plan_detach(
    files_dir: Path,
    store_id: str,
    copy_of: Optional[Path],
    experiments: Sequence[ExperimentRecord],
    trials_of: Callable[[int], list[TrialRecord]],
    jobs: Sequence[JobRecord],
) -> DetachPlan:
    """What detaching a store copies: the store of id ``store_id``, a copy of ``copy_of`` if any.

    ``files_dir`` is the folder of its own files (logs, TensorBoard event files).

    A copy copies every experiment's checkpoint folders and its logs; a store of its own,
    the checkpoint folders of the experiments that meet a folder of another store.
    """
    new_tags: dict[int, str] = {}
    folder_copies: dict[Path, Path] = {}
    kept: list[Path] = []
    for experiment in experiments:
        folders = sorted({Path(trial.checkpoint_dir).parent for trial in trials_of(experiment.id)})
        owners = [folder_owner(folder) for folder in folders]
        if copy_of is not None or any(owner is not None and owner.store_id != store_id for owner in owners):
            new_tags[experiment.id] = secrets.token_hex(4)
            for folder in folders:
                folder_copies[folder] = folder.with_name(f"experiment-{experiment.id}-{new_tags[experiment.id]}")
        else:
            kept.extend(folder for folder in folders if folder.is_dir())
    log_copies: dict[Path, Path] = {}
    moves = dict(folder_copies)
    if copy_of is not None:
        shared, own = store_files_dir(copy_of), files_dir
        moves[shared] = own
        log_copies = log_folder_copies(
            shared, own, [experiment.id for experiment in experiments], [job.id for job in jobs]
        )
    return DetachPlan(new_tags, folder_copies, log_copies, moves, tuple(kept))


def copy_for_detach(plan: DetachPlan, owner: FolderOwner, listed: set[str]) -> list[tuple[Path, Path]]:
    """Copies the folders of ``plan`` that exist; returns each copied with its copy.

    A checkpoint folder's copy holds just the checkpoints ``listed`` (the other store may
    have written more since the copy, or be writing one now) and is owned by ``owner``.
    """
    copied = []
    for source, target in plan.folder_copies.items():
        if source.is_dir():
            _copy_folder(source, target, owner, _listed_checkpoints_only(source, listed))
            copied.append((source, target))
    copied.extend(copy_log_folders(plan.log_copies))
    return copied


def copy_log_folders(log_copies: Mapping[Path, Path], with_log_files: bool = True) -> list[tuple[Path, Path]]:
    """Copies each log folder of ``log_copies`` that exists (not the owner file of its store); returns those copied.

    Each is copied whole or not at all (see :func:`_copy_folder`). Without
    ``with_log_files``, the output logs are left out (a store that keeps its logs in its
    database gets them there), and the TensorBoard event files copied alone.
    """
    copied = []
    for source, target in log_copies.items():
        if source.is_dir():
            _copy_folder(source, target, None, _owner_files if with_log_files else _owner_and_log_files)
            copied.append((source, target))
    return copied


def _owner_files(directory: str, names: list[str]) -> set[str]:
    """What a copy of a folder leaves out: the owner file of the store it came from."""
    return {name for name in names if name.startswith(OWNER_FILE)}


def _owner_and_log_files(directory: str, names: list[str]) -> set[str]:
    """What a copy of a folder leaves out: the owner file of the store it came from, and the output logs."""
    return _owner_files(directory, names) | {name for name in names if name == LOG_FILE_NAME}


def _listed_checkpoints_only(source: Path, listed: set[str]) -> Callable[[str, list[str]], set[str]]:
    """What a copy of an experiment's checkpoint folder leaves out: all but the checkpoints ``listed``.

    In the experiment's folder, its hidden files (the owner file among them); in each
    trial's folder, every checkpoint not listed and the hidden folders of writes and
    deletions under way.
    """

    def ignored(directory: str, names: list[str]) -> set[str]:
        here = Path(directory)
        if here == source:
            return {name for name in names if name.startswith(".")}
        if here.parent == source:
            return {name for name in names if name not in listed}
        return set()

    return ignored


def _copy_folder(
    source: Path, target: Path, owner: Optional[FolderOwner], ignore: Callable[[str, list[str]], set[str]]
) -> None:
    """Copies ``source`` to ``target`` whole, or not at all: into a hidden folder beside it, renamed once complete.

    ``ignore`` says what is left out (as ``shutil.copytree``'s); ``owner``, when given, owns the copy.
    """
    partial = target.with_name(f".detaching-{target.name}-{secrets.token_hex(4)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(source, partial, symlinks=True, ignore=ignore)
        if owner is not None:
            write_folder_owner(partial, owner)
        if target.is_dir():  # a log folder a copy already had beside it (of its own before it was copied over)
            shutil.copytree(partial, target, dirs_exist_ok=True)
            shutil.rmtree(partial)
        else:
            os.rename(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
