"""Trials' and jobs' output logs: written and read through the store, whichever its database.

Every writer (a launched trial run's, a job's) and every reader (``trial logs``, ``job
logs``, the web page, a failed run's cause, ``store copy``) goes through the methods of
:class:`LogTable`, a base of ``ExperimentStore``; none opens a log itself.

On PostgreSQL the output goes into the ``log_chunks`` table, so that ``trial logs`` reads
it from any machine that reaches the database (the store's files folder is local to the
machine that made it). A run's output arrives line by line from its processes' pipe;
:class:`_DatabaseLogWriter` keeps it in memory and inserts it from a thread of its own
every :data:`FLUSH_SECONDS` (sooner past :data:`FLUSH_CHARACTERS`), so that neither one
INSERT per line nor a database that does not answer slows the pipe, which the processes
block on once it is full.

On SQLite each log stays a file in the store's files folder (``log_path``), appended to
as the lines come, as before: the database is on this machine anyway, ``tail -f`` and an
editor read the file while the trial runs, the output does not take SQLite's one write
lock twice a second per trial from the records of every other run, and the logs of
stores written before the table existed need no migration. The table exists there too,
empty, so that both databases have one schema.
"""

import abc
import contextlib
import enum
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, TextIO

from det_estimator.store._database import Database, StoreLocation, Transaction
from det_estimator.store._jobs import JobRecord
from det_estimator.store._jobs import _Store as JobStore
from det_estimator.store._records import TrialRecord

# A log's file in the store's files folder (SQLite).
LOG_FILE_NAME = "output.log"
# How often a PostgreSQL store's log writer inserts what came since, and how much makes it insert sooner.
FLUSH_SECONDS = 0.5
FLUSH_CHARACTERS = 64 * 1024
# The most output a PostgreSQL store's log writer keeps unwritten while the database does not
# answer; what comes beyond is left out (a line in the log says how much).
UNWRITTEN_LIMIT_CHARACTERS = 8 * 1024 * 1024
# How long closing a writer waits for its output to reach the database.
CLOSE_WAIT_SECONDS = 15.0
# What the web page shows of a log at first, and the most one refresh adds.
TAIL_CHARACTERS = 64 * 1024
# Chunks read at a time.
_PAGE_ROWS = 100


class LogKind(str, enum.Enum):
    """Whose output a log keeps."""

    TRIAL = "trial"
    JOB = "job"


@dataclass(frozen=True)
class LogOwner:
    """The trial or job whose output a log keeps.

    Attributes:
        kind: a trial's log or a job's.
        id: the trial's or job's id.
    """

    kind: LogKind
    id: int

    @classmethod
    def trial(cls, trial_id: int) -> "LogOwner":
        return cls(LogKind.TRIAL, trial_id)

    @classmethod
    def job(cls, job_id: int) -> "LogOwner":
        return cls(LogKind.JOB, job_id)

    @property
    def column(self) -> str:
        """The column of ``log_chunks`` that names the owner."""
        return f"{self.kind.value}_id"

    def __str__(self) -> str:
        return f"{self.kind.value} {self.id}"


@dataclass(frozen=True)
class LogPart:
    """Part of a log, as the web page reads it.

    Attributes:
        text: what was read (an invalid byte sequence of a file shows as U+FFFD).
        offset: where the next read starts (a file's size, or the last chunk's id: only
            the store reads it).
        skipped: whether the text starts past the beginning of what was asked (the log was longer).
        missing: why there is no log to show ("" when there is one).
    """

    text: str
    offset: int
    skipped: bool = False
    missing: str = ""


class LogWriter(abc.ABC):
    """Appends a run's output to its trial's or job's log.

    A log that cannot be written says so once (through the ``on_lost`` it was made with)
    and raises nothing: the processes' output must still be read, as a process blocks
    once its pipe is full, and training goes on.

    Attributes:
        intact: every line written so far is in the log (once closed: is there for good).
    """

    intact: bool

    @abc.abstractmethod
    def write(self, text: str) -> None:
        """Appends ``text``; never raises, and never waits on the database."""

    @abc.abstractmethod
    def close(self) -> None:
        """Writes what is left (waiting up to :data:`CLOSE_WAIT_SECONDS` for the database); never raises."""


class _FileLogWriter(LogWriter):
    """A log file, appended to line by line (SQLite)."""

    def __init__(self, path: Path, owner: LogOwner, on_lost: Callable[[str], None]) -> None:
        self._path = path
        self._owner = owner
        self._on_lost = on_lost
        self._file: Optional[TextIO] = None
        self.intact = True
        # The processes' lines come from the pump's thread; the launcher's own (a hang) from its loop.
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        except OSError as error:
            self._lost(error)

    def write(self, text: str) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.write(text)
                self._file.flush()
            except OSError as error:
                self._lost(error)

    def close(self) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.close()
            except OSError as error:
                self._lost(error)
            self._file = None

    def _lost(self, error: OSError) -> None:
        self.intact = False
        if self._file is not None:
            # What a failed flush left in the buffer would fail again at close.
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        kind = self._owner.kind.value
        self._on_lost(
            f"The {kind}'s log {self._path} cannot be written ({error.strerror or error}): what the {kind} prints "
            f"from now on is not kept there. {_GOES_ON[self._owner.kind]}"
        )


_GOES_ON = {LogKind.TRIAL: "Training goes on.", LogKind.JOB: "The job goes on."}


class _DatabaseLogWriter(LogWriter):
    """A log in the ``log_chunks`` table (PostgreSQL), written in batches by a thread of its own.

    Args:
        open_store: opens a connection of the writer's own to the store (its thread's).
        location: the store, for messages.
        owner: whose log.
        on_lost: told, once, that the log cannot be written.
    """

    def __init__(
        self,
        open_store: Callable[[], "_Store"],
        location: StoreLocation,
        owner: LogOwner,
        on_lost: Callable[[str], None],
    ) -> None:
        self._open_store = open_store
        self._location = location
        self._owner = owner
        self._on_lost = on_lost
        self.intact = True
        self._said = False
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._pending_size = 0
        # Characters written and not yet in the database (pending, or being inserted), and left out past the limit.
        self._unwritten = 0
        self._left_out = 0
        self._closing = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"det-estimator log of {owner}", daemon=True)
        self._thread.start()

    def write(self, text: str) -> None:
        with self._lock:
            if self._closing:
                return
            if self._unwritten + len(text) > UNWRITTEN_LIMIT_CHARACTERS:
                self._left_out += len(text)
                self.intact = False
                self._lost(f"{self._unwritten:,} characters of output wait for it")
                return
            self._add_left_out_line()
            self._pending.append(text)
            self._pending_size += len(text)
            self._unwritten += len(text)
            if self._pending_size >= FLUSH_CHARACTERS:
                self._wake.set()

    def _add_left_out_line(self) -> None:
        """Says in the log how much was left out since the last text kept; called holding the lock."""
        if self._left_out:
            line = (
                f"--- det-estimator: {self._left_out:,} characters of output left out: the store did not answer ---\n"
            )
            self._pending.append(line)
            self._pending_size += len(line)
            self._unwritten += len(line)
            self._left_out = 0

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._add_left_out_line()
        self._wake.set()
        self._thread.join(CLOSE_WAIT_SECONDS + 1)
        with self._lock:
            if self._unwritten:
                self.intact = False
                self._lost(f"{self._unwritten:,} characters of output still unwritten after {CLOSE_WAIT_SECONDS:.0f} s")

    def _run(self) -> None:
        store: Optional[_Store] = None
        deadline: Optional[float] = None
        try:
            while True:
                self._wake.wait(FLUSH_SECONDS)
                self._wake.clear()
                with self._lock:
                    closing, batch = self._closing, self._pending
                    self._pending, self._pending_size = [], 0
                if closing and deadline is None:
                    deadline = time.monotonic() + CLOSE_WAIT_SECONDS
                try:
                    if batch:
                        store = store or self._open_store()
                        with store._write() as transaction:
                            append_chunks(transaction, self._owner, batch)
                except Exception as error:  # whatever the database says, the run goes on
                    with self._lock:
                        self._pending[:0] = batch  # first, before what came meanwhile
                        self._pending_size += sum(map(len, batch))
                        self._lost(_first_line(error))
                    if store is not None:
                        with contextlib.suppress(Exception):
                            store.close()
                        store = None
                else:
                    with self._lock:
                        self._unwritten -= sum(map(len, batch))
                with self._lock:
                    done = self._closing and not self._pending
                if done or (deadline is not None and time.monotonic() > deadline):
                    return
        finally:
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()

    def _lost(self, reason: str) -> None:
        """Says once that the log cannot be written now; called holding the lock."""
        if self._said:
            return
        self._said = True
        kind = self._owner.kind.value
        self._on_lost(
            f"The {kind}'s log in the store {self._location} cannot be written ({reason}): what the {kind} prints "
            f"is kept in memory, up to {UNWRITTEN_LIMIT_CHARACTERS:,} characters, and written once the store "
            f"answers again; beyond that it is left out. {_GOES_ON[self._owner.kind]}"
        )


def _first_line(error: Exception) -> str:
    said = str(error).strip()
    return said.splitlines()[0] if said else type(error).__name__


def append_chunks(transaction: Transaction, owner: LogOwner, texts: Iterable[str]) -> int:
    """Appends ``texts`` to a log in ``log_chunks``, in rows of up to :data:`FLUSH_CHARACTERS`; returns how many rows.

    What PostgreSQL's text cannot hold (NUL, a lone surrogate) is written as U+FFFD.
    """
    rows: list[dict[str, Any]] = []
    now = time.time()
    for text in _pieces_of(texts):
        safe = text.replace("\x00", "\ufffd").encode("utf-8", errors="replace").decode("utf-8")
        rows.append({"trial_id": None, "job_id": None, owner.column: owner.id, "written_at": now, "text": safe})
    transaction.execute_many(
        "INSERT INTO log_chunks (trial_id, job_id, written_at, text) VALUES (:trial_id, :job_id, :written_at, :text)",
        rows,
    )
    return len(rows)


def _pieces_of(texts: Iterable[str]) -> Iterator[str]:
    """``texts`` joined into pieces of up to :data:`FLUSH_CHARACTERS`."""
    pending: list[str] = []
    size = 0
    for text in texts:
        pending.append(text)
        size += len(text)
        if size >= FLUSH_CHARACTERS:
            joined = "".join(pending)
            for start in range(0, len(joined) - FLUSH_CHARACTERS + 1, FLUSH_CHARACTERS):
                yield joined[start : start + FLUSH_CHARACTERS]
            rest = joined[len(joined) - len(joined) % FLUSH_CHARACTERS :]
            pending, size = ([rest], len(rest)) if rest else ([], 0)
    if size:
        yield "".join(pending)


# A query of the store: every row it returns, each by column name.
Fetch = Callable[[str, Mapping[str, Any]], list[Any]]


def chunk_texts(fetch: Fetch, owner: LogOwner) -> Iterator[str]:
    """A log's chunks in ``log_chunks``, in the order written, read a page at a time."""
    last = 0
    while True:
        rows = fetch(
            f"SELECT id, text FROM log_chunks WHERE {owner.column} = :owner AND id > :after ORDER BY id"
            f" LIMIT {_PAGE_ROWS}",
            {"owner": owner.id, "after": last},
        )
        for row in rows:
            yield row["text"]
        if len(rows) < _PAGE_ROWS:
            return
        last = rows[-1]["id"]


def file_texts(path: Path) -> Iterator[str]:
    """A log file's lines (none if there is no file)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            yield from lines
    except (FileNotFoundError, IsADirectoryError):
        return


def write_log_file(path: Path, texts: Iterable[str]) -> bool:
    """Writes ``texts`` as a new log file; returns whether there was any (no file is made for none)."""
    texts = iter(texts)
    first = next(texts, None)
    if first is None:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as log:
        log.write(first)
        for text in texts:
            log.write(text)
    return True


class _Store(JobStore, Protocol):
    """What :class:`LogTable`'s methods use of the ``ExperimentStore`` they are methods of."""

    def trial(self, trial_id: int) -> TrialRecord: ...

    def job(self, job_id: int) -> JobRecord: ...

    def for_thread(self) -> Any: ...

    def close(self) -> None: ...


class LogTable:
    """The store's methods for logs; a base of ``ExperimentStore``, which provides what :class:`_Store` lists."""

    def log_writer(self: _Store, owner: LogOwner, on_lost: Callable[[str], None]) -> LogWriter:
        """A writer that appends a run's output to the log of ``owner``; :meth:`LogWriter.close` it at the run's end.

        Args:
            owner: the trial or job.
            on_lost: told, once, when the log cannot be written, and why.
        """
        if self.location.is_sqlite:
            return _FileLogWriter(_log_file(self, owner), owner, on_lost)
        return _DatabaseLogWriter(self.for_thread, self.location, owner, on_lost)

    def has_log(self: _Store, owner: LogOwner) -> bool:
        """Whether anything was written to the log of ``owner`` (a launched run writes a header line first)."""
        if self.location.is_sqlite:
            return _log_file(self, owner).exists()
        found = self._database.read_one(
            f"SELECT id FROM log_chunks WHERE {owner.column} = :owner LIMIT 1", {"owner": owner.id}
        )
        return found is not None

    def log_texts(self: _Store, owner: LogOwner) -> Iterator[str]:
        """The log of ``owner``, piece by piece in the order written (nothing if it has none)."""
        if self.location.is_sqlite:
            return file_texts(_log_file(self, owner))
        return chunk_texts(self._database.read, owner)

    def log_text(self: _Store, owner: LogOwner) -> str:
        """The whole log of ``owner`` ("" if it has none)."""
        return "".join(LogTable.log_texts(self, owner))

    def log_location(self: _Store, owner: LogOwner) -> str:
        """Where the log of ``owner`` is kept, as messages name it: its file, or the store's database."""
        if self.location.is_sqlite:
            return str(_log_file(self, owner))
        return f"in the store {self.location}"

    def read_log(self: _Store, owner: LogOwner, offset: Optional[int] = None) -> LogPart:
        """The log from ``offset`` (its last :data:`TAIL_CHARACTERS` when None), at most that much of it.

        A file is read only inside the store's own files: a store's record names the path,
        and a page must reach no other file whatever the record says.
        """
        if not self.location.is_sqlite:
            return _read_chunks(self._database, owner, offset)
        path = _log_file(self, owner)
        if not _inside(path, self.files_dir):
            return LogPart("", 0, missing=f"its log {path} is not among the store's files")
        return _read_file(path, offset)


def _log_file(store: _Store, owner: LogOwner) -> Path:
    record = store.trial(owner.id) if owner.kind == LogKind.TRIAL else store.job(owner.id)
    return Path(record.log_path)


def _read_file(path: Path, offset: Optional[int]) -> LogPart:
    try:
        with open(path, "rb") as log:
            size = log.seek(0, 2)
            start = max(size - TAIL_CHARACTERS, 0) if offset is None or offset > size else offset
            skipped = size - start > TAIL_CHARACTERS
            if skipped:
                start = size - TAIL_CHARACTERS
            log.seek(start)
            data = log.read(size - start)
    except FileNotFoundError:
        return LogPart("", 0, missing="it has printed nothing yet")
    except OSError as error:
        return LogPart("", 0, missing=f"its log cannot be read: {error.strerror or error}")
    return LogPart(data.decode("utf-8", errors="replace"), start + len(data), skipped or (offset is None and start > 0))


def _read_chunks(database: Database, owner: LogOwner, offset: Optional[int]) -> LogPart:
    """The newest chunks after chunk ``offset`` (any, when None), back to :data:`TAIL_CHARACTERS` of text.

    Read newest first, a few rows and then more at a time: a chunk holds up to 64 KiB of
    a busy run's output, or the one line a quiet run printed in half a second.
    """
    after = offset or 0
    newest: list[str] = []
    size, last, before, rows_wanted, more = 0, None, None, 4, True
    while more and size < TAIL_CHARACTERS:
        parameters: dict[str, Any] = {"owner": owner.id, "after": after}
        if before is not None:
            parameters["before"] = before
        rows = database.read(
            f"SELECT id, text FROM log_chunks WHERE {owner.column} = :owner AND id > :after"
            + (" AND id < :before" if before is not None else "")
            + f" ORDER BY id DESC LIMIT {rows_wanted}",
            parameters,
        )
        more = len(rows) == rows_wanted
        for row in rows:
            if size >= TAIL_CHARACTERS:
                more = True
                break
            last = row["id"] if last is None else last
            newest.append(row["text"])
            size += len(row["text"])
            before = row["id"]
        rows_wanted = min(rows_wanted * 4, _PAGE_ROWS)
    if last is None:
        return LogPart("", after, missing="" if offset else "it has printed nothing yet")
    text = "".join(reversed(newest))
    skipped = size > TAIL_CHARACTERS or (size == TAIL_CHARACTERS and more)
    return LogPart(text[-TAIL_CHARACTERS:], int(last), skipped)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
