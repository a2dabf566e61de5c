"""A store's identity: what a file is before the store writes to it, and which store owns a folder.

A det-estimator store is recognised by its marker (the ``store_info`` table, see
``_schema``), read through a read-only connection before anything is written: any other
SQLite database is refused and left as it is. Each store has a random id; each folder it
writes in (its experiments' checkpoint folders, its own files beside it) holds a small
file naming the store that owns it, so that a store never writes or deletes in a folder
of another.
"""

import enum
import json
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator.store._errors import StoreUnusableError
from det_estimator.store._schema import APPLICATION, APPLICATION_ID, MARKED_VERSION, tables_of_version

# The file in a folder that names the store owning it.
OWNER_FILE = ".det-estimator-store"


class StoreCopyError(StoreUnusableError):
    """The store is a copy of another that still exists: it is read-only until detached."""


class FolderOwnedError(StoreUnusableError):
    """A folder the store would write or delete in belongs to another store."""


class StoreFileKind(enum.Enum):
    """What a store file holds, as read before the store writes to it."""

    NEW = "new"  # no file, an empty one, or a database without a table: a store is made there
    OURS = "ours"  # a det-estimator store, marked or of a release before the marker
    FOREIGN = "foreign"  # another application's database


@dataclass(frozen=True)
class StoreFile:
    """What :func:`inspect_store_file` found.

    Attributes:
        kind: new, a det-estimator store, or another application's database.
        tables: the database's tables (for the message that refuses a foreign one).
        store_id: the marked store's id; None before the store has its marker.
    """

    kind: StoreFileKind
    tables: tuple[str, ...] = ()
    store_id: Optional[str] = None


@dataclass(frozen=True)
class FolderOwner:
    """The store a folder belongs to, as its owner file records it.

    Attributes:
        store_id: the owning store's id.
        store_path: where that store's file was when it claimed the folder.
    """

    store_id: str
    store_path: str


def inspect_store_file(path: Path) -> StoreFile:
    """What the file at ``path`` is, read without writing a byte to it.

    Raises:
        sqlite3.DatabaseError: the file is not an SQLite database, or cannot be read.
    """
    if not path.exists() or path.stat().st_size == 0:
        return StoreFile(StoreFileKind.NEW)
    # mode=ro: no journal, no WAL switch, no schema made; the file stays as it is. Without a
    # journal or WAL file beside it no process is writing it, and reading it as immutable
    # spares a database in WAL mode the -wal and -shm files a read-only reader would make.
    quiet = not any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-journal"))
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro{'&immutable=1' if quiet else ''}", uri=True, timeout=60.0)
    try:
        tables = tuple(
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        )
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        application_id = int(connection.execute("PRAGMA application_id").fetchone()[0])
        if "store_info" in tables:
            try:
                row = connection.execute("SELECT application, store_id FROM store_info WHERE id = 1").fetchone()
            except sqlite3.OperationalError:  # a table of that name, not ours
                row = None
            if row is not None and row[0] == APPLICATION:
                return StoreFile(StoreFileKind.OURS, tables, str(row[1]))
            return StoreFile(StoreFileKind.FOREIGN, tables)
    finally:
        connection.close()
    if application_id not in (0, APPLICATION_ID):
        return StoreFile(StoreFileKind.FOREIGN, tables)
    if not tables and version == 0:
        # A database with nothing in it: a store another process is making right now, say.
        return StoreFile(StoreFileKind.NEW, tables)
    if 0 < version < MARKED_VERSION and tables_of_version(version) <= set(tables):
        # A store of a release before the marker, which its upgrade adds.
        return StoreFile(StoreFileKind.OURS, tables)
    return StoreFile(StoreFileKind.FOREIGN, tables)


def foreign_database_message(path: Path, tables: tuple[str, ...]) -> str:
    """Why a database another application made is not used as a store, and what to give instead."""
    shown = ", ".join(tables[:6]) + (f" and {len(tables) - 6} more" if len(tables) > 6 else "")
    holding = f"its tables: {shown}" if tables else "no table of a det-estimator store"
    return (
        f"{path} is an SQLite database that det-estimator did not make ({holding}); det-estimator leaves it as it "
        f"is. Give the --store (or {environment_variables.STORE}) of a det-estimator store, or a path where there "
        "is no file yet, where a new store is made."
    )


def holds_store(path: Path, store_id: str) -> bool:
    """Whether ``path`` is a det-estimator store with the id ``store_id`` (read only; False when it cannot be read)."""
    try:
        found = inspect_store_file(path)
    except (sqlite3.Error, OSError):
        return False
    return found.kind == StoreFileKind.OURS and found.store_id == store_id


def folder_owner(folder: Path) -> Optional[FolderOwner]:
    """The store that owns ``folder``, or None when no store has claimed it (or it does not exist)."""
    try:
        recorded = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
        return FolderOwner(str(recorded["store_id"]), str(recorded["store_path"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StoreUnusableError(
            f"Cannot read which store owns the folder {folder}: {folder / OWNER_FILE} is unreadable ({error}). "
            "Expected the file a det-estimator store writes there; restore it, or remove it to let this store "
            "claim the folder."
        ) from None


def write_folder_owner(folder: Path, owner: FolderOwner, replace: bool = True) -> FolderOwner:
    """Records ``owner`` as the store owning ``folder``, whole or not at all; returns the folder's owner then.

    Args:
        folder: the folder.
        owner: its owner.
        replace: replace an owner recorded already; else the first store to claim the
            folder owns it, and the owner returned may be another.
    """
    handle, temporary = tempfile.mkstemp(prefix=f"{OWNER_FILE}.", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump({"store_id": owner.store_id, "store_path": owner.store_path}, file)
            file.write("\n")
        if replace:
            os.replace(temporary, folder / OWNER_FILE)
            return owner
        try:
            os.link(temporary, folder / OWNER_FILE)  # fails if another store claimed it first
        except FileExistsError:
            found = folder_owner(folder)
            return owner if found is None else found
        return owner
    finally:
        Path(temporary).unlink(missing_ok=True)


def copy_message(path: Path, original: Path, store_id: str) -> str:
    """What a copy of a store that still exists says when asked to write."""
    return (
        f"The store {path} is a copy of the store {original} (both are store {store_id}), which still exists: "
        "both would write into, and delete from, the same checkpoint folders and logs, so the copy is read-only. "
        f"Read it as it is, or make it a store of its own (a new id, its own copies of its experiments' "
        f"checkpoints and logs): det-estimator --store {path} store detach"
    )


def owned_folder_message(folder: Path, owner: FolderOwner, path: str, store_id: str) -> str:
    """What a store says of a folder that another store owns."""
    return (
        f"The folder {folder} belongs to another det-estimator store, {owner.store_path} (store {owner.store_id}); "
        f"the store {path} (store {store_id}) neither writes nor deletes there. Use that store for this "
        f"experiment, or, if this store was copied from it on purpose, give this store its own copies of the "
        f"folders it shares: det-estimator --store {path} store detach"
    )


@dataclass(frozen=True)
class DetachReport:
    """What ``ExperimentStore.detach`` did.

    Attributes:
        path: the store detached.
        old_id: its id before (that of the store it was copied from).
        new_id: its own id now.
        copied: each folder copied, with its copy (checkpoint folders under a new tag, log folders).
        claimed: folders that stay where they are and now record the new id.
        checkpoints_gone: checkpoints it listed whose files were gone (deleted by the other
            store's retention, say), now recorded as deleted.
    """

    path: str
    old_id: str
    new_id: str
    copied: tuple[tuple[str, str], ...]
    claimed: tuple[str, ...]
    checkpoints_gone: tuple[str, ...]


class NothingToDetachError(StoreUnusableError):
    """``store detach`` of a store that is neither a copy nor meets a folder of another store."""
