"""Where a store is, and the one way the store talks to its database: SQLAlchemy Core 2 over SQLite or PostgreSQL.

A store is an SQLite file, named by its path, or a PostgreSQL database, named by its URL
(:class:`StoreLocation`, parsed once by :func:`parse_store_location`). Every query the
store runs goes through a :class:`Database`: :meth:`Database.read` outside any
transaction, and :meth:`Database.write`, one transaction that holds the store's write
lock, so that writers take turns on both databases alike. On SQLite the lock is the
file's own (``BEGIN IMMEDIATE``); on PostgreSQL it is a transaction-scoped advisory lock
of a constant key (:data:`WRITE_LOCK_KEY`), taken first in every write transaction. The
one-launcher-per-trial claim, the pause request, the searcher's handshake and retention
marks read and write inside such a transaction, and keep their serial meaning.

A PostgreSQL server may restart under a running experiment (a crash, an upgrade). Once a
store has reached its server, a lost connection is waited out: every read, and every
store method that writes (:func:`retried`), runs again, whole, until the server answers,
for at most :data:`RECONNECT_SECONDS` in a row (:meth:`Database.retrying`); then the store
raises :class:`StoreUnavailableError`. A write is run again only if its transaction did
not commit: when the answer to its ``COMMIT`` is what was lost, the server is asked
whether the transaction committed (``pg_xact_status`` of its id) before anything is
redone, so that no record is written twice. A server never reached is an error at once.

The queries are text in SQL that both databases read, with named bind parameters
(``:name``), and ``INSERT ... RETURNING id`` for the id of a new row.
"""

import contextlib
import errno
import functools
import os
import re
import shutil
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union, cast

import sqlalchemy
from sqlalchemy.engine import URL, Connection, Engine, RowMapping
from sqlalchemy.pool import StaticPool

from det_estimator import _environment_variables as environment_variables
from det_estimator.store._errors import (
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreUnavailableError,
    StoreUnusableError,
)

# PostgreSQL's advisory lock that every write transaction of a store takes first: "detE", the
# application id an SQLite store carries in its header. Advisory locks are per database, and a
# database holds one store.
WRITE_LOCK_KEY = 0x64657445
# Seconds a connection to a PostgreSQL server may take before the store gives up on it.
CONNECT_TIMEOUT_SECONDS = 5
# How long, in a row, the store waits for a PostgreSQL server it had reached to answer again: a
# server restarting after a crash takes seconds, one recovering a large write-ahead log longer.
RECONNECT_SECONDS = 60.0
# The waits between two attempts to reach it: from the first, doubled each time, up to the last.
_FIRST_WAIT_SECONDS, _LAST_WAIT_SECONDS = 0.05, 2.0
# The schemes of a PostgreSQL store's URL.
POSTGRESQL_SCHEMES = ("postgresql", "postgresql+psycopg")
# SQLITE_BUSY and SQLITE_FULL; the sqlite3 module names its codes only from Python 3.11.
_SQLITE_BUSY, _SQLITE_FULL = 5, 13

# "postgresql://...", "sqlite:///...", "mysql+pymysql://...": a URL, not a file path. A
# database's URL made into a Path has lost a slash ("postgresql:/user@host/db"): that too.
_DATABASE_URL = re.compile(
    r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://|(?P<collapsed>(?:postgres|postgresql|mysql|mariadb|sqlite)(?:\+\w+)?):/)"
)

Parameters = Mapping[str, Any]
T = TypeVar("T")
Method = TypeVar("Method", bound=Callable[..., Any])


@dataclass(frozen=True, repr=False)
class StoreLocation:
    """Where a store is: an SQLite file, or a PostgreSQL database.

    Attributes:
        path: the SQLite file, absolute; None for a PostgreSQL store.
        url: the PostgreSQL database's URL as given (its password included, if it has
            one); None for an SQLite store. Never shown: :attr:`shown` is.
    """

    path: Optional[Path] = None
    url: Optional[str] = None

    @property
    def is_sqlite(self) -> bool:
        return self.path is not None

    @property
    def shown(self) -> str:
        """The file's path, or the database's URL with its password hidden: what messages and records show."""
        if self.path is not None:
            return str(self.path)
        return self.sqlalchemy_url().set(drivername="postgresql").render_as_string(hide_password=True)

    @property
    def without_password(self) -> str:
        """The file's path, or the database's URL with no password: what a command to paste names.

        The shell it is pasted into gives the password (``PGPASSWORD``, ``~/.pgpass``).
        """
        if self.path is not None:
            return str(self.path)
        url = self.sqlalchemy_url()
        bare = URL.create("postgresql", url.username, None, url.host, url.port, url.database, url.query)
        return bare.render_as_string(hide_password=False)

    @property
    def passed_on(self) -> str:
        """What the processes of a run are given to open the same store (a URL keeps its password)."""
        return str(self.path) if self.path is not None else str(self.url)

    def environment(self) -> dict[str, str]:
        """What a process given :attr:`without_password` needs in its environment to open the store: its password."""
        if self.url is None:
            return {}
        password = sqlalchemy.make_url(self.url).password
        return {} if password is None else {"PGPASSWORD": str(password)}

    def sqlalchemy_url(self) -> URL:
        """The URL SQLAlchemy opens, with the psycopg driver for PostgreSQL."""
        if self.path is not None:
            return URL.create("sqlite", database=str(self.path))
        return sqlalchemy.make_url(str(self.url)).set(drivername="postgresql+psycopg")

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        # Not the dataclass's, which would show the URL's password in a traceback or a log.
        return f"StoreLocation({self.shown!r})"


def parse_store_location(given: Union[str, "os.PathLike[str]", StoreLocation], named_by: str) -> StoreLocation:
    """The store ``given`` names: a path is an SQLite file; a ``postgresql://`` URL a PostgreSQL database.

    Args:
        given: a path (``~`` expanded, made absolute), or a URL.
        named_by: what gave it (``--store``, the variable), for the message that refuses it.

    Raises:
        StoreUnusableError: a URL of another scheme, or one without a database name.
    """
    if isinstance(given, StoreLocation):
        return given
    text = os.fspath(given)
    found = _DATABASE_URL.match(text)
    if found is None:
        # Absolute: the experiment's processes run in its context directory, not here.
        return StoreLocation(path=Path(text).expanduser().resolve())
    scheme = found["scheme"] or found["collapsed"]
    shown = _without_password(text)
    accepted = (
        "Expected the path of an SQLite file, such as runs/store.sqlite (made where it is missing), or a "
        "PostgreSQL database's URL, postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or postgresql+psycopg://...)"
    )
    if found["collapsed"] is not None or scheme.lower() not in POSTGRESQL_SCHEMES:
        raise StoreUnusableError(
            f"{named_by} {shown} is a database URL of the scheme {scheme}, not a store. {accepted}."
        )
    try:
        url = sqlalchemy.make_url(text)
    except (sqlalchemy.exc.ArgumentError, ValueError) as error:
        raise StoreUnusableError(f"{named_by} {shown} is not a URL that can be read ({error}). {accepted}.") from None
    if not url.database:
        raise StoreUnusableError(f"{named_by} {shown} names no database. {accepted}.")
    return StoreLocation(url=text)


def default_store_path() -> Path:
    """``$DET_ESTIMATOR_STORE`` (when a path), else ``$XDG_DATA_HOME/det-estimator/store.sqlite``.

    ``XDG_DATA_HOME`` defaults to ``~/.local/share``, so each user has a store of their own.
    """
    explicit = os.environ.get(environment_variables.STORE)
    if explicit and _DATABASE_URL.match(explicit) is None:
        return Path(explicit).expanduser()
    return data_home() / "det-estimator" / "store.sqlite"


def data_home() -> Path:
    """``$XDG_DATA_HOME``, else ``~/.local/share``."""
    return Path(os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share"))


def store_location(given: Union[str, "os.PathLike[str]", StoreLocation, None] = None) -> StoreLocation:
    """The store ``given`` names, else the one ``DET_ESTIMATOR_STORE`` names, else the default SQLite file."""
    if isinstance(given, StoreLocation):
        return given
    if given is not None and os.fspath(given):
        return parse_store_location(given, "The store")
    explicit = os.environ.get(environment_variables.STORE)
    if explicit:
        return parse_store_location(explicit, environment_variables.STORE)
    return StoreLocation(path=default_store_path().resolve())


def _without_password(text: str) -> str:
    """``text``, a URL, with the password of its user part replaced by ``***``."""
    parts = urllib.parse.urlsplit(text)
    try:
        password = parts.password
    except ValueError:
        password = None
    if password is None:
        return text
    credentials, _, host = parts.netloc.rpartition("@")
    user = credentials.split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class ConnectionLostError(StoreUnusableError):
    """The connection to a PostgreSQL server the store had reached was lost: :meth:`Database.retrying` waits it out."""


def retried(method: Method) -> Method:
    """A store method run again, whole, while its database's server is away (see :meth:`Database.retrying`).

    For the methods that write: each is one transaction (or several, each safe to run
    again), with nothing outside the database that running it again would repeat.
    """

    @functools.wraps(method)
    def run(store: Any, *args: Any, **kwargs: Any) -> Any:
        database: Database = store._database
        return database.retrying(lambda: method(store, *args, **kwargs))

    return cast(Method, run)


@functools.lru_cache(maxsize=1024)
def statement(sql: str) -> sqlalchemy.TextClause:
    """The statement of the query ``sql``, made once per query string and reused by every call.

    Parsing the text for its bind parameters and computing the statement's cache key, which
    finds its compiled form, cost more than SQLite's own work on a small write; a statement
    object made once does both once. The store's queries are a bounded set of strings.
    """
    return sqlalchemy.text(sql)


class Transaction:
    """The queries of one write transaction, which holds the store's write lock (see :meth:`Database.write`)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def rows(self, sql: str, parameters: Optional[Parameters] = None) -> list[RowMapping]:
        """Every row the query returns, each read by column name."""
        return list(self.connection.execute(statement(sql), dict(parameters or {})).mappings())

    def row(self, sql: str, parameters: Optional[Parameters] = None) -> Optional[RowMapping]:
        """The query's first row, or None."""
        return self.connection.execute(statement(sql), dict(parameters or {})).mappings().first()

    def execute(self, sql: str, parameters: Optional[Parameters] = None) -> None:
        """Runs a statement that returns nothing."""
        self.connection.execute(statement(sql), dict(parameters or {}))

    def execute_many(self, sql: str, parameters: Sequence[Parameters]) -> None:
        """Runs one statement for each set of parameters."""
        if parameters:
            self.connection.execute(statement(sql), [dict(each) for each in parameters])

    def insert(self, sql: str, parameters: Optional[Parameters] = None) -> int:
        """Runs an ``INSERT ... RETURNING id``; returns the id of the row it made."""
        made = self.connection.execute(statement(sql), dict(parameters or {})).scalar()
        if made is None:
            raise StoreError("The store's INSERT made no row.")
        return int(made)


class Database:
    """One store's database: an Engine, reads, and write transactions that take turns.

    Every connection runs in autocommit mode, and a write opens its transaction itself:
    ``BEGIN IMMEDIATE`` on SQLite (which takes the file's write lock at once), ``BEGIN``
    and the advisory lock on PostgreSQL. A read runs outside any transaction and sees
    what was committed. A connection is not tested before each use (a round trip per
    read): one the server dropped fails its first statement, and is waited out as any
    lost connection is (:meth:`retrying`).

    Args:
        location: the store.
        lock_wait_seconds: how long a write waits for another writer's lock (SQLite's busy timeout).
    """

    def __init__(self, location: StoreLocation, lock_wait_seconds: float) -> None:
        self.location = location
        self._lock_wait_seconds = lock_wait_seconds
        # The connection in use, while one is: a read inside a write runs in the write's transaction.
        self._current: Optional[Connection] = None
        # Whether the server has taken a connection: only then is one it refuses waited out.
        self._reached = False
        # While the server is away: since when (time.monotonic()), and the wait before the next attempt.
        self._away_since: Optional[float] = None
        self._next_wait = _FIRST_WAIT_SECONDS
        # Inside retrying(): a call within it that loses the connection is run again by it, whole.
        self._retrying = False
        self.engine: Engine
        if location.path is not None:
            # One connection per store, as an sqlite3 connection serves the thread that opened it.
            self.engine = sqlalchemy.create_engine(
                location.sqlalchemy_url(),
                isolation_level="AUTOCOMMIT",
                poolclass=StaticPool,
                # Each write ends its own transaction; a rollback on return would end a write's
                # transaction were the connection handed out twice.
                pool_reset_on_return=None,
                connect_args={"timeout": lock_wait_seconds},
            )
            sqlalchemy.event.listen(self.engine, "connect", _sqlite_connected)
        else:
            url = location.sqlalchemy_url()
            arguments: dict[str, Any] = {}
            if "connect_timeout" not in url.query:
                arguments["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
            self.engine = sqlalchemy.create_engine(
                url, isolation_level="AUTOCOMMIT", pool_reset_on_return=None, connect_args=arguments
            )

    @property
    def is_sqlite(self) -> bool:
        return self.location.is_sqlite

    def sqlite_connection(self) -> sqlite3.Connection:
        """The SQLite store's one connection, for what only SQLite has (its pragmas, its migration chain)."""
        with self._connect() as connection:
            raw = connection.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        return raw

    def read(self, sql: str, parameters: Optional[Parameters] = None) -> list[RowMapping]:
        """Every row the query returns, each read by column name."""
        return self.retrying(lambda: self._read(lambda connection: connection.rows(sql, parameters)))

    def read_one(self, sql: str, parameters: Optional[Parameters] = None) -> Optional[RowMapping]:
        """The query's first row, or None."""
        return self.retrying(lambda: self._read(lambda connection: connection.row(sql, parameters)))

    def _read(self, query: Callable[[Transaction], T]) -> T:
        with self._connect() as connection:
            return query(Transaction(connection))

    def retrying(self, call: Callable[[], T]) -> T:
        """``call()``, run again, whole, each time it loses the connection to a server the store had reached.

        Between attempts it waits, longer each time, for at most :data:`RECONNECT_SECONDS`
        since the server stopped answering (across calls: once that has passed, a call
        makes one attempt). A call made inside another's retrying, or inside a write
        transaction, is run again by the outer one: its connection is that one's.

        Raises:
            StoreUnavailableError: the server has not answered for :data:`RECONNECT_SECONDS`.
        """
        if self._retrying or self._current is not None or self.is_sqlite:
            return call()
        self._retrying = True
        try:
            while True:
                try:
                    result = call()
                except ConnectionLostError as lost:
                    self._wait_for_server(str(lost))
                    continue
                return result
        finally:
            self._retrying = False

    def _wait_for_server(self, why: str) -> None:
        """Waits before the next attempt to reach the server, which just failed for ``why``.

        Raises:
            StoreUnavailableError: the server has been away for :data:`RECONNECT_SECONDS`.
        """
        now = time.monotonic()
        if self._away_since is None:
            self._away_since, self._next_wait = now, _FIRST_WAIT_SECONDS
        if now - self._away_since >= RECONNECT_SECONDS:
            raise StoreUnavailableError(
                f"{why.rstrip('.')}; it has not answered for {now - self._away_since:.0f} s, as long as the store "
                "waits for its database server to come back. What was recorded before stays."
            ) from None
        time.sleep(self._next_wait)
        self._next_wait = min(2 * self._next_wait, _LAST_WAIT_SECONDS)

    @contextlib.contextmanager
    def write(self) -> Iterator[Transaction]:
        """One transaction holding the store's write lock: committed at the end, rolled back on an error.

        Raises:
            StoreLockedError: another process held the SQLite file's lock longer than a write waits.
            StoreFullError: the SQLite file's disk (or quota) is full.
        """
        with self._connect() as connection:
            xid: Optional[str] = None
            if self.is_sqlite:
                try:
                    connection.exec_driver_sql("BEGIN IMMEDIATE")
                except sqlalchemy.exc.OperationalError as error:
                    if isinstance(error.orig, sqlite3.OperationalError) and is_locked(error.orig):
                        raise StoreLockedError(
                            locked_message(self.location, error.orig, lock_wait_seconds=self._lock_wait_seconds)
                        ) from None
                    raise
            else:
                connection.exec_driver_sql("BEGIN")
                # The transaction's id, in the lock's round trip: should the answer to its
                # COMMIT be lost, the server tells by it whether the transaction committed.
                locked = statement("SELECT pg_advisory_xact_lock(:key), CAST(pg_current_xact_id() AS text)")
                xid = str(connection.execute(locked, {"key": WRITE_LOCK_KEY}).one()[1])
            try:
                yield Transaction(connection)
                self._commit(connection, xid)
            except BaseException as error:
                self._roll_back(connection)
                cause = error.orig if isinstance(error, sqlalchemy.exc.DBAPIError) else error
                if isinstance(cause, sqlite3.OperationalError) and is_full(cause):
                    raise StoreFullError(full_message(self.location, cause)) from None
                raise

    def _commit(self, connection: Connection, xid: Optional[str]) -> None:
        """Commits the transaction ``xid`` (None on SQLite); returns if it committed, even if the answer was lost.

        Raises:
            sqlalchemy.exc.DBAPIError: the transaction did not commit.
        """
        try:
            connection.exec_driver_sql("COMMIT")
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError):
            if xid is None or not self._committed(xid):
                raise

    def _committed(self, xid: str) -> bool:
        """Whether the transaction ``xid``, whose COMMIT's answer was lost, committed; asked until the server answers.

        Raises:
            StoreUnavailableError: the server has not answered for :data:`RECONNECT_SECONDS`.
        """
        asked = sqlalchemy.text("SELECT pg_xact_status(CAST(:xid AS xid8))")
        while True:
            try:
                # Another connection than the lost one, which the pool has discarded.
                with self.engine.connect() as connection:
                    status = connection.execute(asked, {"xid": xid}).scalar()
            except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as error:
                self._wait_for_server(str(self.translated(error)))
                continue
            self._away_since = None
            if status != "in progress":  # a server that lost sight of the client may not have ended it yet
                return status == "committed"
            self._wait_for_server(f"The transaction {xid} of the store {self.location} is still in progress")

    def check_writable(self) -> None:
        """Takes the write lock and writes in a transaction rolled back at once (PostgreSQL).

        Raises:
            StoreUnusableError: the database's user may not write the store's tables.
        """
        with self._connect() as connection:
            try:
                connection.exec_driver_sql("BEGIN")
                connection.execute(statement("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITE_LOCK_KEY})
                connection.exec_driver_sql("UPDATE store_info SET schema_version = schema_version WHERE id = 1")
            except sqlalchemy.exc.ProgrammingError as error:
                raise StoreUnusableError(
                    f"The store {self.location} cannot be written: {self.without_password(str(error.orig).strip())}. "
                    "Expected a database user that may write the store's tables."
                ) from None
            finally:
                self._roll_back(connection)

    def _roll_back(self, connection: Connection) -> None:
        # SQLite ends the transaction itself on some errors (a full disk among them), and a
        # ROLLBACK then would raise "no transaction is active" in place of the cause.
        if self.is_sqlite:
            raw = connection.connection.driver_connection
            if isinstance(raw, sqlite3.Connection) and raw.in_transaction:
                raw.execute("ROLLBACK")
            return
        if connection.invalidated:
            return  # the connection was lost, and its transaction ended with it
        with contextlib.suppress(sqlalchemy.exc.DBAPIError):
            connection.exec_driver_sql("ROLLBACK")

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        """A connection; the driver's errors come out as the store's (SQLite's as they are, but a damaged file)."""
        if self._current is not None:
            yield self._current
            return
        try:
            with self.engine.connect() as connection:
                self._reached = True
                self._current = connection
                try:
                    yield connection
                finally:
                    self._current = None
            # The server answered all that was asked of it: an outage, if there was one, is over.
            self._away_since = None
        except sqlalchemy.exc.DBAPIError as error:
            raise self.translated(error) from None

    def translated(self, error: sqlalchemy.exc.DBAPIError) -> BaseException:
        """What the store raises for an error of the database's driver.

        On SQLite, the ``sqlite3`` error itself, which the store reads for locks, full
        disks and read-only files, but a damaged file's, which is a
        :class:`StoreUnusableError`. On PostgreSQL, a :class:`StoreUnusableError` for a
        server that cannot be reached or refuses the connection (a
        :class:`ConnectionLostError` once it had been reached), a :class:`StoreError`
        for any other failure; none shows the password.
        """
        cause = error.orig
        if self.is_sqlite:
            if isinstance(cause, sqlite3.DatabaseError):
                return damaged_store_error(self.location, cause) or cause
            return cause if isinstance(cause, sqlite3.Error) else error
        said = self.without_password(" ".join(str(cause).split()).rstrip("?."))
        if isinstance(error, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)) and self._reached:
            return ConnectionLostError(f"Lost the connection to the store {self.location}: {said}.")
        if isinstance(error, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return StoreUnusableError(
                f"Cannot reach the store {self.location}: {said}. Expected a running PostgreSQL server at that host "
                "and port, a database of that name, and a user it lets in (its password given in the URL, "
                "PGPASSWORD or ~/.pgpass)."
            )
        return StoreError(f"The store {self.location} failed a query: {said}")

    def without_password(self, text: str) -> str:
        """``text`` without the password of the store's URL, wherever the driver put it."""
        url = None if self.location.url is None else sqlalchemy.make_url(self.location.url)
        if url is not None and url.password:
            text = text.replace(str(url.password), "***")
        return text

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_connected(connection: sqlite3.Connection, _record: Any) -> None:
    connection.row_factory = sqlite3.Row
    connection.execute("PRAGMA foreign_keys = ON")


def is_locked(error: sqlite3.OperationalError) -> bool:
    """Whether SQLite failed for another process's lock (SQLITE_BUSY)."""
    return getattr(error, "sqlite_errorcode", None) == _SQLITE_BUSY or "database is locked" in str(error)


def locked_message(
    location: StoreLocation,
    error: sqlite3.OperationalError,
    lock_wait_seconds: float,
    then: str = "resume the experiment",
) -> str:
    return (
        f"The store {location} cannot be written: {error} (another process held a write transaction open on it for "
        f"more than {lock_wait_seconds:.0f} s; det-estimator's own writes take milliseconds). End that "
        f"transaction (an `sqlite3` shell inside BEGIN, say), then {then}."
    )


def is_full(error: sqlite3.OperationalError) -> bool:
    """Whether SQLite failed for a full disk (SQLITE_FULL)."""
    return getattr(error, "sqlite_errorcode", None) == _SQLITE_FULL or "database or disk is full" in str(error)


def full_message(location: StoreLocation, error: sqlite3.OperationalError) -> str:
    assert location.path is not None
    try:
        free = f"{shutil.disk_usage(location.path.parent).free:,} bytes free there now"
    except OSError:
        free = "its free space unknown"
    return (
        f"The store {location} cannot be written: {error} ({os.strerror(errno.ENOSPC)}, {free}). What it recorded "
        "before stays; free space there, then resume the experiment (`det-estimator experiment resume ID`)."
    )


def damaged_store_error(
    location: Union[StoreLocation, Path], error: sqlite3.DatabaseError
) -> Optional[StoreUnusableError]:
    """The error to show for a query that found the SQLite store's file damaged; None for any other SQLite error.

    A store damaged past its first page opens (SQLite reads only the header and the
    schema then), and fails at the first query that reaches a damaged table.
    ``sqlite3.DatabaseError`` itself, not a subclass, is what SQLite's "malformed" and
    "not a database" become; a lock or a full disk is an ``OperationalError``.
    """
    if type(error) is not sqlite3.DatabaseError:
        return None
    return StoreUnusableError(
        f"Cannot read the store {location}: {error}. Its file is damaged; restore it from a copy, or give the "
        f"--store (or {environment_variables.STORE}) of another store."
    )


def enable_wal(connection: sqlite3.Connection, deadline: float) -> None:
    """Puts the SQLite database in WAL mode, waiting for other writers as long as ``deadline`` allows.

    Switching a new file to WAL needs its write lock, and SQLite reports "database is
    locked" at once, without the busy timeout, when another process holds it (one that
    is creating the same new store, say).
    """
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
