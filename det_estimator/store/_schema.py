"""The store's tables, and the steps that bring an older store up to date.

An SQLite store's schema version lives in SQLite's ``user_version``, and from version 8
also in the ``store_info`` table, the store's marker: the application that made it, its
schema version and the store's id, in a table (not only in SQLite's header) so that a
store in another database keeps them. Migration ``i`` (0-based) takes an SQLite store
from version ``i`` to ``i + 1``. A new store is made at the newest version when first
opened; a store of an older schema only by ``det-estimator store upgrade``
(:func:`refuse_an_older_schema`: whatever else opens it is refused, saying so), and a store
newer than :data:`SCHEMA_VERSION` was made by a newer det-estimator and is refused.

A PostgreSQL store is made at the current version from the tables of ``_tables``, in one
transaction under the store's write lock (:func:`open_postgresql_store`), and has no
older versions. The next change of the schema (version 10) is written once per
database: a step appended to :data:`MIGRATIONS` for SQLite, and the same change made to
``_tables`` and run on PostgreSQL as a step of its own, in the same kind of transaction
under the lock, that reads and updates ``store_info.schema_version``; it runs from
``store upgrade`` as the SQLite chain does, and an older PostgreSQL store is refused
elsewhere with the same message. A test reflects both databases and compares them. One
such step needs no library; once there are several, an Alembic revision per step (its
``upgrade()`` issuing the ``op.add_column``, its version table ``store_info``) keeps
them in order.
"""

import re
import secrets
import shlex
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator.store._database import Database
from det_estimator.store._errors import NoStoreError, StoreError, StoreUnusableError, StoreUpgradeNeededError
from det_estimator.store._tables import METADATA

# The marker's application name, and SQLite's header field that says the same ("detE").
APPLICATION = "det-estimator"
APPLICATION_ID = 0x64657445

# Each step is plain statements separated by semicolons (no triggers).
MIGRATIONS: list[str] = [
    # 0 -> 1: the first schema.
    """
    CREATE TABLE experiments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        config TEXT NOT NULL,
        context_dir TEXT NOT NULL,
        entrypoint TEXT NOT NULL,
        command TEXT,
        slots INTEGER NOT NULL,
        hosts TEXT,
        test_mode INTEGER NOT NULL,
        created_at REAL NOT NULL,
        ended_at REAL,
        launcher_pid INTEGER,
        launcher_host TEXT
    );
    CREATE TABLE trials (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        experiment_id INTEGER NOT NULL REFERENCES experiments(id),
        state TEXT NOT NULL,
        hparams TEXT NOT NULL,
        seed INTEGER NOT NULL,
        checkpoint_dir TEXT NOT NULL,
        log_path TEXT NOT NULL,
        batches_trained INTEGER NOT NULL DEFAULT 0,
        max_batches INTEGER,
        created_at REAL NOT NULL,
        ended_at REAL
    );
    CREATE TABLE metrics (
        trial_id INTEGER NOT NULL REFERENCES trials(id),
        kind TEXT NOT NULL CHECK (kind IN ('training', 'validation')),
        batches INTEGER NOT NULL,
        metrics TEXT NOT NULL,
        recorded_at REAL NOT NULL
    );
    CREATE INDEX metrics_by_trial ON metrics (trial_id, kind, batches);
    CREATE TABLE checkpoints (
        uuid TEXT PRIMARY KEY,
        trial_id INTEGER NOT NULL REFERENCES trials(id),
        batches INTEGER NOT NULL,
        path TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('COMPLETED', 'DELETED')),
        created_at REAL NOT NULL
    );
    CREATE INDEX checkpoints_by_trial ON checkpoints (trial_id, batches);
    """,
    # 1 -> 2: runs of a trial (resumes and restarts), pause requests through the store,
    # runs found again by key, and the per-experiment tag of the checkpoint layout.
    """
    ALTER TABLE experiments ADD COLUMN run_key TEXT;
    ALTER TABLE experiments ADD COLUMN pause_requested_at REAL;
    ALTER TABLE experiments ADD COLUMN storage_tag TEXT NOT NULL DEFAULT '';
    ALTER TABLE experiments ADD COLUMN trial_class TEXT;
    CREATE INDEX experiments_by_run_key ON experiments (run_key);
    CREATE TABLE trial_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id INTEGER NOT NULL REFERENCES trials(id),
        started_at REAL NOT NULL,
        ended_at REAL,
        state TEXT NOT NULL,
        preempted INTEGER NOT NULL DEFAULT 0,
        exit_status INTEGER,
        error TEXT
    );
    CREATE INDEX trial_runs_by_trial ON trial_runs (trial_id);
    ALTER TABLE metrics ADD COLUMN run_id INTEGER;
    ALTER TABLE checkpoints ADD COLUMN run_id INTEGER;
    """,
    # 2 -> 3: hyperparameter search. The search method's saved state, and per trial its
    # place in the search and the one outstanding operation it trains towards.
    """
    ALTER TABLE experiments ADD COLUMN searcher_state TEXT;
    ALTER TABLE trials ADD COLUMN request_id INTEGER;
    ALTER TABLE trials ADD COLUMN search_state TEXT;
    ALTER TABLE trials ADD COLUMN target_length INTEGER;
    ALTER TABLE trials ADD COLUMN reported_length INTEGER;
    ALTER TABLE trials ADD COLUMN reported_metric TEXT;
    ALTER TABLE trials ADD COLUMN answered_length INTEGER;
    ALTER TABLE trials ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE trial_runs ADD COLUMN start_batches INTEGER NOT NULL DEFAULT 0;
    """,
    # 3 -> 4: jobs (``det-estimator job run``): a script run on N slots outside any
    # experiment, such as batch inference, with its state and its output log.
    """
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        config TEXT NOT NULL,
        context_dir TEXT NOT NULL,
        command TEXT NOT NULL,
        slots INTEGER NOT NULL,
        log_path TEXT NOT NULL,
        created_at REAL NOT NULL,
        ended_at REAL,
        exit_status INTEGER,
        error TEXT,
        launcher_pid INTEGER,
        launcher_host TEXT
    );
    """,
    # 4 -> 5: automatic restarts of a failed trial: which run failed, and its cause (the
    # failing rank's error line), one row per restart.
    """
    CREATE TABLE trial_restarts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id INTEGER NOT NULL REFERENCES trials(id),
        failed_run_id INTEGER NOT NULL REFERENCES trial_runs(id),
        number INTEGER NOT NULL,
        cause TEXT NOT NULL,
        restarted_at REAL NOT NULL
    );
    CREATE INDEX trial_restarts_by_trial ON trial_restarts (trial_id);
    """,
    # 5 -> 6: when the launcher's process started, so that another process given its pid
    # later (pids wrap, at 32768 by default) is not taken for it.
    """
    ALTER TABLE experiments ADD COLUMN launcher_started INTEGER;
    """,
    # 6 -> 7: the same for a job's launcher.
    """
    ALTER TABLE jobs ADD COLUMN launcher_started INTEGER;
    """,
    # 7 -> 8: the store's marker and identity: the application that made it (so that no
    # other database is taken for a store), its schema version, a random id that the
    # folders it writes record as their owner, and its home, the file it was made as
    # (recorded on its first opening, see ExperimentStore), which tells a copy elsewhere.
    f"""
    CREATE TABLE store_info (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        application TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        store_id TEXT NOT NULL,
        home TEXT,
        created_at REAL NOT NULL
    );
    INSERT INTO store_info (id, application, schema_version, store_id, created_at)
        VALUES (1, '{APPLICATION}', 8, lower(hex(randomblob(16))), CAST(strftime('%s', 'now') AS REAL));
    PRAGMA application_id = {APPLICATION_ID};
    """,
    # 8 -> 9: what a store on PostgreSQL needs as well. A metric has an id column of its own
    # (it had SQLite's rowid, which PostgreSQL has no equivalent of; the ids stay what they
    # were, so a follower that read up to an id reads on from it), and the marker records
    # the folder of the store's own files, which a store in a database server has nowhere
    # beside it to keep (NULL for an SQLite store, whose files are beside its file). Trials'
    # and jobs' output logs, which a PostgreSQL store keeps in log_chunks (an SQLite store
    # keeps them as files, see _logs; the table is there, empty, for one schema). An
    # experiment's and a job's launcher refresh a heartbeat, by the database's clock, which
    # tells whether one on another machine still runs (see _launchers).
    """
    ALTER TABLE metrics RENAME TO metrics_before_9;
    CREATE TABLE metrics (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id INTEGER NOT NULL REFERENCES trials(id),
        kind TEXT NOT NULL CHECK (kind IN ('training', 'validation')),
        batches INTEGER NOT NULL,
        metrics TEXT NOT NULL,
        recorded_at REAL NOT NULL,
        run_id INTEGER
    );
    INSERT INTO metrics (id, trial_id, kind, batches, metrics, recorded_at, run_id)
        SELECT rowid, trial_id, kind, batches, metrics, recorded_at, run_id FROM metrics_before_9;
    DROP TABLE metrics_before_9;
    CREATE INDEX metrics_by_trial ON metrics (trial_id, kind, batches);
    ALTER TABLE store_info ADD COLUMN files_dir TEXT;
    CREATE TABLE log_chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id INTEGER REFERENCES trials(id),
        job_id INTEGER REFERENCES jobs(id),
        written_at REAL NOT NULL,
        text TEXT NOT NULL,
        CONSTRAINT log_chunks_one_owner CHECK ((trial_id IS NULL) <> (job_id IS NULL))
    );
    CREATE INDEX log_chunks_by_trial ON log_chunks (trial_id, id);
    CREATE INDEX log_chunks_by_job ON log_chunks (job_id, id);
    ALTER TABLE experiments ADD COLUMN launcher_seen_at REAL;
    ALTER TABLE jobs ADD COLUMN launcher_seen_at REAL;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)
# The first schema version with the store_info table.
MARKED_VERSION = 8


def tables_of_version(version: int, migrations: Optional[list[str]] = None) -> set[str]:
    """The tables a det-estimator store of schema ``version`` has (those its migrations create)."""
    steps = (MIGRATIONS if migrations is None else migrations)[:version]
    return {name for step in steps for name in re.findall(r"CREATE TABLE (\w+)", step)}


@dataclass(frozen=True)
class SchemaUpgrade:
    """The schema version a store had when it was opened, and the one it has.

    Attributes:
        from_version: the version it had (0: a new store, made at this opening).
        to_version: the version it has now, :data:`SCHEMA_VERSION`.
    """

    from_version: int
    to_version: int

    @property
    def upgraded(self) -> bool:
        """Whether this opening upgraded an existing store."""
        return 0 < self.from_version < self.to_version


def refuse_an_older_schema(connection: sqlite3.Connection, path: str, upgrade: bool = False) -> None:
    """Refuses an SQLite store of an older schema unless ``upgrade``; called before a byte of the store is written.

    A store of an older schema is upgraded explicitly (``det-estimator store upgrade``),
    not by whatever opens it first: an upgrade cannot be undone (older releases then
    refuse the store), so it is the user's decision, taken when nothing runs on it. A
    new store (version 0) is made by :func:`migrate` at whatever opening comes first.

    Args:
        connection: a connection to the store.
        path: the store's file, for messages.
        upgrade: the store is opened to be upgraded.

    Raises:
        StoreUpgradeNeededError: the store has an older schema, and ``upgrade`` is False.
    """
    version = _user_version(connection)
    if 0 < version < SCHEMA_VERSION and not upgrade:
        command = f"det-estimator --store {shlex.quote(path)} store upgrade"
        raise StoreUpgradeNeededError(
            f"The store {path} has schema version {version}, older than this det-estimator's {SCHEMA_VERSION}. "
            f"Upgrade it once, while nothing runs on it: `{command}` (det-estimator releases before this one "
            "cannot open it afterwards: keep a copy of the file to go back to them), then run the command again."
        )


def migrate(connection: sqlite3.Connection, path: str, migrations: Optional[list[str]] = None) -> int:
    """Brings the store at ``path`` to the newest schema, every step in one transaction; returns the version it had.

    A store is at its old version or the new one, never between: a step that fails
    leaves it as it was, and a process opening a new store while another makes it never
    sees it half made (at an older version, which it would refuse). Safe when several
    processes do it at once: the version is read again inside the write transaction,
    so each step runs exactly once.

    Args:
        connection: a connection in autocommit mode (``isolation_level=None``).
        path: the store's file, for messages.
        migrations: the steps (default :data:`MIGRATIONS`).

    Raises:
        StoreError: the store was made by a newer det-estimator.
    """
    migrations = MIGRATIONS if migrations is None else migrations
    _refuse_a_newer_store(connection, path, migrations)
    if _user_version(connection) == len(migrations):
        return len(migrations)
    connection.execute("BEGIN IMMEDIATE")
    try:
        _refuse_a_newer_store(connection, path, migrations)
        found = _user_version(connection)
        for version in range(found, len(migrations)):
            for statement in migrations[version].split(";"):
                if statement.strip():
                    connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {version + 1}")
            if version + 1 >= MARKED_VERSION:
                connection.execute("UPDATE store_info SET schema_version = ?", (version + 1,))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return found


def _refuse_a_newer_store(connection: sqlite3.Connection, path: str, migrations: list[str]) -> None:
    version = _user_version(connection)
    if version > len(migrations):
        raise StoreError(
            f"The store {path} has schema version {version}, made by a newer det-estimator; this "
            f"version reads schema versions up to {len(migrations)}. Upgrade det-estimator, or point "
            f"--store (or {environment_variables.STORE}) at another file."
        )


def _user_version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


@dataclass(frozen=True)
class PostgresqlMarker:
    """What a PostgreSQL store's marker records.

    Attributes:
        store_id: the store's id, which the folders it writes record.
        files_dir: the folder of its own files (trial logs, TensorBoard event files).
    """

    store_id: str
    files_dir: Path


def open_postgresql_store(
    database: Database, choose_files_dir: Callable[[], Path], create: bool = True
) -> PostgresqlMarker:
    """Makes a store in an empty PostgreSQL database, or reads the marker of the store it holds.

    Safe when several processes open a new database at once: the tables and the marker
    are made in one transaction under the store's write lock, by whichever process takes
    it first; the others find them made.

    Args:
        database: the database.
        choose_files_dir: the folder of the new store's files, made and checked writable
            (called only when this process makes the store).
        create: make a store in an empty database; else an empty database is refused.

    Raises:
        StoreUnusableError: the database holds tables and no det-estimator marker (it is
            left as it is), or a store of a newer schema.
        NoStoreError: the database is empty, and ``create`` is False.
    """
    tables = _postgresql_tables(database.read)
    if not tables and not create:
        raise NoStoreError(
            f"There is no experiment store in the database {database.location}. Give the --store (or "
            f"{environment_variables.STORE}) of an existing store; `det-estimator experiment create` makes one."
        )
    if not tables:
        with database.write() as transaction:
            if not _postgresql_tables(transaction.rows):
                files_dir = choose_files_dir()
                METADATA.create_all(transaction.connection)
                transaction.execute(
                    "INSERT INTO store_info (id, application, schema_version, store_id, home, created_at, files_dir)"
                    " VALUES (1, :application, :version, :store_id, :home, :created_at, :files_dir)",
                    {
                        "application": APPLICATION,
                        "version": SCHEMA_VERSION,
                        "store_id": secrets.token_hex(16),
                        "home": database.location.shown,
                        "created_at": time.time(),
                        "files_dir": str(files_dir),
                    },
                )
        tables = _postgresql_tables(database.read)
    row = None
    if "store_info" in tables:
        try:
            row = database.read_one(
                "SELECT application, schema_version, store_id, files_dir FROM store_info WHERE id = 1"
            )
        except StoreError:  # a table of that name, not ours
            row = None
    if row is None or row["application"] != APPLICATION or row["files_dir"] is None:
        raise StoreUnusableError(foreign_postgresql_message(database, tables))
    version = int(row["schema_version"])
    if version > SCHEMA_VERSION:
        raise StoreUnusableError(
            f"The store {database.location} has schema version {version}, made by a newer det-estimator; this "
            f"version reads schema versions up to {SCHEMA_VERSION}. Upgrade det-estimator, or point --store (or "
            f"{environment_variables.STORE}) at another store."
        )
    return PostgresqlMarker(str(row["store_id"]), Path(row["files_dir"]))


def _postgresql_tables(read: Callable[..., list]) -> tuple[str, ...]:
    """The tables of the database's current schema, by name."""
    rows = read(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        " AND table_type = 'BASE TABLE' ORDER BY table_name"
    )
    return tuple(str(row["table_name"]) for row in rows)


def foreign_postgresql_message(database: Database, tables: tuple[str, ...]) -> str:
    """Why a PostgreSQL database another application filled is not used as a store, and what to give instead."""
    shown = ", ".join(tables[:6]) + (f" and {len(tables) - 6} more" if len(tables) > 6 else "")
    return (
        f"The database {database.location} holds tables that det-estimator did not make (its tables: {shown}); "
        f"det-estimator leaves it as it is. Give the --store (or {environment_variables.STORE}) of a det-estimator "
        "store, or of an empty database, where a new store is made."
    )
