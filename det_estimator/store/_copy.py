"""``store copy``: every record of one store copied into another, new or empty, in one transaction.

The source is read in one snapshot (a read transaction: what it held when the copy
began, whoever writes it meanwhile), table by table in the order of their foreign keys,
in pages of :data:`BATCH_ROWS` rows by primary key, so that a store of millions of
metrics is never held in memory whole. The destination is written in one write
transaction: a copy that fails at any point leaves it holding what it held before,
nothing. Rows keep their ids (on PostgreSQL each id sequence is set past them after).

The destination stays a store of its own: its id, its home and its files folder. Its
records point at the same checkpoint folders as the source's, and those move to it:
each folder the source owned records the destination as its owner afterwards, so the
source no longer writes or deletes there, as in any folder another store owns (``store
detach`` on the source gives it copies of its own). The trials' and jobs' logs and
TensorBoard event files are copied into the destination's files folder, and the paths
it records rewritten to them. The output logs go where the destination keeps its logs
(see ``_logs``): as files between two SQLite stores; into the destination's
``log_chunks`` (PostgreSQL), or out of the source's into files (SQLite), otherwise.
"""

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import sqlalchemy
from sqlalchemy import ColumnElement, Executable, Table, func, literal_column, select
from sqlalchemy.engine import Connection

from det_estimator.store._database import StoreLocation, Transaction
from det_estimator.store._detach import copy_log_folders, log_folder_copies, moved_path
from det_estimator.store._errors import StoreUnusableError
from det_estimator.store._identity import OWNER_FILE, FolderOwner, folder_owner, write_folder_owner
from det_estimator.store._launchers import database_clock, launcher_alive
from det_estimator.store._logs import LogOwner, append_chunks, chunk_texts, file_texts, write_log_file
from det_estimator.store._records import State
from det_estimator.store._store import ExperimentStore
from det_estimator.store._tables import EXPERIMENTS, JOBS, LOG_CHUNKS, METADATA, STORE_INFO, TRIALS

# Rows read from the source, and written to the destination, at a time.
BATCH_ROWS = 2000

# Every table but the marker and the logs, parents before the tables that refer to them. The
# destination keeps its own marker: its id, home and files folder; the logs go where it keeps them.
COPIED_TABLES: tuple[Table, ...] = tuple(
    table for table in METADATA.sorted_tables if table is not STORE_INFO and table is not LOG_CHUNKS
)


class StoreCopyRefusedError(StoreUnusableError):
    """A store copy refused before anything was written: the source runs, or the destination holds records."""


@dataclass(frozen=True)
class TableCopied:
    """How many rows of one table a copy wrote."""

    table: str
    rows: int


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_store` did.

    Attributes:
        source: the store copied (a URL without its password).
        destination: the store it was copied into.
        destination_id: the destination's id, which it keeps.
        tables: each table copied, in the order copied, with its rows.
        logs_copied: each log folder (a trial's output log and TensorBoard event files, a
            job's log) copied, with its copy in the destination's files folder; and each
            log copied between the files of one store and the database of the other, as
            ``trial <id>`` or ``job <id>`` with where it was and where it went.
        folders_moved: the checkpoint folders that belong to the destination now.
        folders_left: checkpoint folders that a third store owns, with its path: neither
            the source nor the destination writes there.
    """

    source: str
    destination: str
    destination_id: str
    tables: tuple[TableCopied, ...]
    logs_copied: tuple[tuple[str, str], ...]
    folders_moved: tuple[str, ...]
    folders_left: tuple[tuple[str, str], ...]


def copy_store(source: ExperimentStore, destination: StoreLocation) -> CopyReport:
    """Copies every record of ``source`` into the store at ``destination`` (made if missing), moving its folders.

    Raises:
        StoreCopyRefusedError: the two are one store; the source is a copy of another
            store; an experiment or job of the source runs; the destination holds an
            experiment or a job. Nothing is written then.
        StoreUnusableError: the destination cannot be used (another application's
            database, a copy of another store, a folder it cannot write).
    """
    _refuse_the_same_store(source.location, destination)
    if source.copy_of is not None:
        raise StoreCopyRefusedError(
            f"The store {source.location} is a copy of the store {source.copy_of}, which still exists: its checkpoint "
            f"folders belong to that store, and cannot move to another. Copy {source.copy_of} itself, or make this "
            f"copy a store of its own first (det-estimator --store {source.location.without_password} store detach)."
        )
    with _snapshot(source) as read:
        _refuse_a_running_source(source.location, read)
        with ExperimentStore(destination) as target:
            target.check_writable()
            target.own_folders(None)
            return _copy_into(source, read, target)


def _refuse_the_same_store(source: StoreLocation, destination: StoreLocation) -> None:
    if source.path is not None and destination.path is not None:
        same = source.path == destination.path or (
            destination.path.exists() and os.path.samefile(source.path, destination.path)
        )
    elif source.path is None and destination.path is None:
        ours, theirs = source.sqlalchemy_url(), destination.sqlalchemy_url()
        same = (ours.host or "localhost", ours.port or 5432, ours.database) == (
            theirs.host or "localhost",
            theirs.port or 5432,
            theirs.database,
        )
    else:
        same = False
    if same:
        raise StoreCopyRefusedError(
            f"SRC and DST are the same store, {source}. Expected DST to be another store: a path where there is no "
            "store yet, or an empty PostgreSQL database."
        )


# A query of the source's snapshot: the rows it returns, each by column name.
Read = Callable[[Executable], list[dict[str, Any]]]


@contextlib.contextmanager
def _snapshot(store: ExperimentStore) -> Iterator[Read]:
    """Queries of the store inside one read transaction, which sees the store as it was at its start.

    SQLite's deferred transaction takes its snapshot at the first read (WAL mode lets
    writers go on meanwhile); PostgreSQL's repeatable read at the first query. Nothing
    is written: the transaction is rolled back at the end. A query's error is the
    store's, naming it (not the destination, whose transaction it fails).
    """
    database = store._database  # the store's own connection: on SQLite, the only one it has

    def read(query: Executable) -> list[dict[str, Any]]:
        try:
            return [dict(row) for row in connection.execute(query).mappings()]
        except sqlalchemy.exc.DBAPIError as error:
            raise database.translated(error) from None

    try:
        with database.engine.connect() as connection:
            if database.is_sqlite:
                connection.exec_driver_sql("BEGIN")
            else:
                connection.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield read
            finally:
                connection.exec_driver_sql("ROLLBACK")
    except sqlalchemy.exc.DBAPIError as error:
        raise database.translated(error) from None


def _refuse_a_running_source(location: StoreLocation, read: Read) -> None:
    """Refuses a source with an experiment or a job whose launcher lives: it writes records and logs as it runs."""
    running = []
    clock: ColumnElement[float] = literal_column(database_clock(location.is_sqlite))
    for table, what in ((EXPERIMENTS, "experiment"), (JOBS, "job")):
        silence = (clock - func.coalesce(table.c.launcher_seen_at, 0)).label("launcher_silence")
        rows = read(
            select(table.c.id, table.c.launcher_pid, table.c.launcher_host, table.c.launcher_started, silence)
            .where(table.c.state == State.ACTIVE.value)
            .order_by(table.c.id)
        )
        for row in rows:
            alive = launcher_alive(
                row["launcher_pid"], row["launcher_host"], row["launcher_started"], row["launcher_silence"]
            )
            if alive:
                running.append(f"{what} {row['id']} (process {row['launcher_pid']} on {row['launcher_host']})")
    if running:
        raise StoreCopyRefusedError(
            f"The store {location} is in use: {', '.join(running)} runs now, and writes to it as it runs. Wait for "
            f"it to end, or pause it (det-estimator --store {location.without_password} experiment pause ID), then "
            "copy the store."
        )


def _refuse_a_destination_holding_records(location: StoreLocation, writing: Connection) -> None:
    experiments: int = writing.execute(select(func.count()).select_from(EXPERIMENTS)).scalar_one()
    jobs: int = writing.execute(select(func.count()).select_from(JOBS)).scalar_one()
    if experiments or jobs:
        raise StoreCopyRefusedError(
            f"The store {location} holds {experiments} experiment(s) and {jobs} job(s): `store copy` copies into a "
            "new or empty store only, and leaves this one as it is. Expected as DST a path where there is no store "
            "yet, a store holding nothing, or an empty PostgreSQL database."
        )


def _copy_into(source: ExperimentStore, read: Read, target: ExperimentStore) -> CopyReport:
    """Copies the tables in one write transaction of ``target``; then its logs, and moves the checkpoint folders."""
    moves = {source.files_dir: target.files_dir}
    experiment_ids: list[int] = []
    job_ids: list[int] = []
    checkpoint_folders: set[Path] = set()

    # Each log: whose, its file in the source (SQLite), and in the destination (SQLite).
    logs: list[tuple[LogOwner, Path, Path]] = []

    def seen(table: Table, row: dict[str, Any]) -> dict[str, Any]:
        if table is EXPERIMENTS:
            experiment_ids.append(int(row["id"]))
        elif table in (JOBS, TRIALS):
            owner = LogOwner.job(int(row["id"])) if table is JOBS else LogOwner.trial(int(row["id"]))
            if table is JOBS:
                job_ids.append(owner.id)
            else:
                checkpoint_folders.add(Path(row["checkpoint_dir"]).parent)
            moved = moved_path(row["log_path"], moves)
            logs.append((owner, Path(row["log_path"]), Path(moved)))
            row["log_path"] = moved
        return row

    new_log_folders: set[Optional[Path]] = set()
    owners_before: dict[Path, Optional[FolderOwner]] = {}
    try:
        with target._write() as transaction:
            writing = transaction.connection
            _refuse_a_destination_holding_records(target.location, writing)
            tables = tuple(TableCopied(table.name, copy_table(read, writing, table, seen)) for table in COPIED_TABLES)
            if not target.location.is_sqlite:
                _advance_id_sequences(writing)
            # SQLite moves its AUTOINCREMENT counters past the ids written itself.
            log_copies = log_folder_copies(source.files_dir, target.files_dir, experiment_ids, job_ids)
            new_log_folders = {_outermost_missing(copy, target.files_dir) for copy in log_copies.values()}
            files_to_files = source.location.is_sqlite and target.location.is_sqlite
            logs_copied = [(str(copied), str(copy)) for copied, copy in copy_log_folders(log_copies, files_to_files)]
            if not files_to_files:
                logs_copied += _copy_logs(logs, read, source, transaction, target)
            # Last, just before the commit: a copy that fails before it leaves the folders the source's.
            moved, left = _move_folders(checkpoint_folders, source, target, owners_before)
    except BaseException:
        for made in new_log_folders:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        for folder, owner in owners_before.items():
            if owner is None:
                (folder / OWNER_FILE).unlink(missing_ok=True)
            else:
                write_folder_owner(folder, owner)
        raise
    return CopyReport(
        source=source.location.shown,
        destination=target.location.shown,
        destination_id=target.store_id,
        tables=tables,
        logs_copied=tuple(logs_copied),
        folders_moved=tuple(moved),
        folders_left=tuple(left),
    )


def _copy_logs(
    logs: list[tuple[LogOwner, Path, Path]],
    read: Read,
    source: ExperimentStore,
    transaction: Transaction,
    target: ExperimentStore,
) -> list[tuple[str, str]]:
    """Copies each log from where the source keeps it to where the destination does; returns those copied.

    From the source's files (SQLite) or its ``log_chunks`` (read in the copy's snapshot),
    into the destination's ``log_chunks`` (in the copy's transaction) or files (in the
    folders a failed copy removes).
    """

    def fetch(sql: str, parameters: Mapping[str, Any]) -> list[Any]:
        return read(sqlalchemy.text(sql).bindparams(**parameters))

    copied = []
    for owner, source_file, target_file in logs:
        texts = file_texts(source_file) if source.location.is_sqlite else chunk_texts(fetch, owner)
        if target.location.is_sqlite:
            written = write_log_file(target_file, texts)
        else:
            written = append_chunks(transaction, owner, texts) > 0
        if written:
            was = str(source_file) if source.location.is_sqlite else f"{owner} in {source.location}"
            went = str(target_file) if target.location.is_sqlite else f"{owner} in {target.location}"
            copied.append((was, went))
    return copied


def _outermost_missing(folder: Path, within: Path) -> Optional[Path]:
    """The outermost of ``folder`` and its parents below ``within`` that does not exist yet (None if it exists)."""
    missing = None
    while folder != within and not folder.exists():
        missing, folder = folder, folder.parent
    return missing


def copy_table(
    read: Read,
    writing: Connection,
    table: Table,
    seen: Callable[[Table, dict[str, Any]], dict[str, Any]],
) -> int:
    """Copies every row of ``table``, a page of :data:`BATCH_ROWS` at a time in the order of its key; returns how many.

    ``seen`` is given each row read, and returns the row to write.
    """
    (key,) = table.primary_key.columns
    copied = 0
    last = None
    while True:
        query = select(table).order_by(key).limit(BATCH_ROWS)
        if last is not None:
            query = query.where(key > last)
        rows = [seen(table, row) for row in read(query)]
        if not rows:
            return copied
        writing.execute(table.insert(), rows)
        copied += len(rows)
        last = rows[-1][key.name]
        if len(rows) < BATCH_ROWS:
            return copied


def _advance_id_sequences(writing: Connection) -> None:
    """Sets each id sequence of a PostgreSQL store past the largest id copied, so that a new row gets the next."""
    for table in COPIED_TABLES:
        key = table.autoincrement_column
        if key is None:
            continue
        writing.execute(
            sqlalchemy.text(
                f"SELECT setval(pg_get_serial_sequence(:table, :column), "
                f"COALESCE((SELECT MAX({key.name}) FROM {table.name}), 0) + 1, false)"
            ),
            {"table": table.name, "column": key.name},
        )


def _move_folders(
    folders: set[Path],
    source: ExperimentStore,
    target: ExperimentStore,
    owners_before: dict[Path, Optional[FolderOwner]],
) -> tuple[list[str], list[tuple[str, str]]]:
    """Makes ``target`` the owner of each checkpoint folder that ``source`` owned (or no store did).

    A folder that already names ``target`` is one an interrupted copy moved. Each
    folder's owner before is recorded in ``owners_before``, to put back should the copy
    fail. Returns the folders moved, and those a third store owns, with its path.
    """
    mine = FolderOwner(target.store_id, target.home)
    moved: list[str] = []
    left: list[tuple[str, str]] = []
    for folder in sorted(folders):
        if not folder.is_dir():
            continue
        owner = folder_owner(folder)
        if owner is not None and owner.store_id not in (source.store_id, target.store_id):
            left.append((str(folder), owner.store_path))
            continue
        owners_before[folder] = owner
        write_folder_owner(folder, mine)
        moved.append(str(folder))
    return moved, left
