"""ExperimentStore: experiments, trials, their runs, metrics and checkpoints in one database, SQLite or PostgreSQL."""

import contextlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from sqlalchemy.engine import RowMapping

from det_estimator import _environment_variables as environment_variables
from det_estimator._host_list import HostSlots, format_hosts, parse_hosts
from det_estimator.store._database import (
    Database,
    StoreLocation,
    Transaction,
    damaged_store_error,
    data_home,
    enable_wal,
    is_locked,
    locked_message,
    retried,
    store_location,
)
from det_estimator.store._detach import copy_for_detach, plan_detach, store_files_dir
from det_estimator.store._errors import (
    ExperimentBusyError,
    StoreError,
    StoreUnusableError,
    UnknownIdError,
)
from det_estimator.store._identity import (
    DetachReport,
    FolderOwnedError,
    FolderOwner,
    NothingToDetachError,
    StoreCopyError,
    StoreFileKind,
    copy_message,
    folder_owner,
    foreign_database_message,
    holds_store,
    inspect_store_file,
    owned_folder_message,
    write_folder_owner,
)
from det_estimator.store._jobs import JobTable
from det_estimator.store._launchers import (
    Launched,
    LauncherHeartbeat,
    database_clock,
    launcher_alive,
    launcher_columns,
    launcher_silence,
    state_as_seen,
)
from det_estimator.store._logs import LogTable
from det_estimator.store._records import (
    Assignment,
    BestValidation,
    CheckpointRecord,
    ExperimentRecord,
    MetricKind,
    MetricRecord,
    NewTrial,
    SearchState,
    State,
    TrialRecord,
    TrialRunRecord,
)
from det_estimator.store._restarts import RestartRecord
from det_estimator.store._schema import (
    SCHEMA_VERSION,
    SchemaUpgrade,
    migrate,
    open_postgresql_store,
    refuse_an_older_schema,
)

STORE_VARIABLE = environment_variables.STORE


def trial_checkpoint_dir(storage_root: Union[str, os.PathLike], experiment_id: int, tag: str, trial_id: int) -> Path:
    """Where a trial's checkpoints go: ``<storage_root>/experiment-<id>-<tag>/trial-<id>``.

    The one checkpoint layout of every experiment. ``tag`` is random per experiment, so
    two stores (or a store made anew) sharing a checkpoint storage never resume each
    other's checkpoints.
    """
    return Path(storage_root) / f"experiment-{experiment_id}-{tag}" / f"trial-{trial_id}"


def _read_only_message(path: Path, error: Exception) -> str:
    return (
        f"The store {path} cannot be written: {error}. Expected a store file, and a folder, that this user can "
        "write (SQLite keeps its journal beside the file, and writes there even to read the store)."
    )


def _new_files_dir(location: StoreLocation) -> Path:
    """The folder of a new PostgreSQL store's files: ``$DET_ESTIMATOR_STORE_FILES``, else one per database.

    The default, ``$XDG_DATA_HOME/det-estimator/<host>-<port>-<database>-files``, is this
    user's on this machine; a store used from several machines names a shared folder.
    """
    explicit = os.environ.get(environment_variables.STORE_FILES)
    if explicit:
        folder = Path(explicit).expanduser().resolve()
    else:
        url = location.sqlalchemy_url()
        name = f"{url.host or 'localhost'}-{url.port or 5432}-{url.database}-files"
        folder = data_home() / "det-estimator" / name
    _check_files_dir(folder, location)
    return folder


def _check_files_dir(folder: Path, location: StoreLocation) -> None:
    """Makes the folder of a PostgreSQL store's files, and refuses one this user cannot write."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK | os.X_OK)
    except OSError as error:
        writable, reason = False, error.strerror or str(error)
    else:
        reason = "this user cannot write it"
    if not writable:
        raise StoreUnusableError(
            f"The store {location} keeps its trial logs and TensorBoard event files in {folder}, which cannot be "
            f"used: {reason}. Expected a folder this user can write: set {environment_variables.STORE_FILES} to "
            "one before the store is made."
        )


# How long a write waits for another process's write transaction to end.
_LOCK_WAIT_SECONDS = 60.0


class ExperimentStore(JobTable, LogTable):
    """The record of every experiment run on this store.

    SQLite in WAL mode: readers never block the writer, and several processes (two
    experiments at once, or a trial's chief and the command following it) write
    safely; each write is one short transaction that waits for the others rather than
    failing. Beside the database, ``<name>-files/experiments/<id>/trial-<id>/`` holds
    each trial's output log and TensorBoard event files, so that two stores in one
    folder never share them.

    Or a PostgreSQL database, which many processes on many machines write at once: its
    writers take turns through the store's advisory lock (see ``_database``), the trials'
    and jobs' output logs are in the database (see ``_logs``), and its other files go in
    the folder its marker records (:attr:`files_dir`).

    A store is recognised by its marker before anything is written to the file (see
    ``_identity``): another application's database is refused and left as it is. Each
    store has an id, and the folders it writes in record it as their owner
    (:meth:`own_folders`). A store whose file is a copy of another store that still
    exists (the id of both, recorded with the other's path as its home) is read-only
    until :meth:`detach` makes it a store of its own; a store moved elsewhere (nothing of
    its id left at its home) takes its new place as its home.

    Args:
        path: the database file, or a :class:`StoreLocation` or a ``postgresql://`` URL
            (default: ``DET_ESTIMATOR_STORE``, else :func:`default_store_path`); an SQLite
            file is created, with its directory, if missing.
        create: make a store in an empty PostgreSQL database; else one is refused
            (:class:`NoStoreError`). The command decides itself whether to make a missing
            SQLite file.
        upgrade: upgrade a store of an older schema (``store upgrade``); else one is
            refused (:class:`StoreUpgradeNeededError`).

    Attributes:
        location: where the store is.
        store_id: the store's id, which the folders it writes record.
        copy_of: the store this one is a copy of, while that one exists; None for a store
            of its own.
        schema: the schema version the store had when opened, and the one it has.

    Raises:
        StoreError: the file is not a det-estimator store, or of a newer schema.
        StoreUpgradeNeededError: the store has an older schema, and ``upgrade`` is False.
    """

    def __init__(
        self, path: Union[str, os.PathLike, StoreLocation, None] = None, create: bool = True, upgrade: bool = False
    ) -> None:
        self.location = store_location(path)
        self.copy_of: Optional[Path] = None
        self._files_dir: Optional[Path] = None
        # Heartbeats are written, and their age read, by the database's clock, whose SQL differs per database.
        self._clock = database_clock(self.location.is_sqlite)
        self._reads = _Reads.of(self.location.is_sqlite)
        # What this process launches beats from a thread of its own, through a connection of its own.
        self._heartbeat = LauncherHeartbeat(self.for_thread)
        # A PostgreSQL store has no older schema yet (see _schema).
        self.schema = SchemaUpgrade(SCHEMA_VERSION, SCHEMA_VERSION)
        if self.location.path is None:
            self._open_postgresql(create)
            return
        try:
            self._open_sqlite(upgrade)
        except BaseException:
            if hasattr(self, "_database"):  # a store refused once its connection was open (an older schema, say)
                self._database.close()
            raise

    @property
    def path(self) -> Path:
        """The SQLite store's file, absolute.

        Raises:
            StoreError: the store is a PostgreSQL database, which has no file.
        """
        if self.location.path is None:
            raise StoreError(f"The store {self.location} is a PostgreSQL database, not a file.")
        return self.location.path

    @property
    def home(self) -> str:
        """Where the store is, as its records and its folders' owner files name it: its file, or its bare URL."""
        return self.location.shown

    def _open_postgresql(self, create: bool) -> None:
        self._database = Database(self.location, _LOCK_WAIT_SECONDS)
        try:
            marker = open_postgresql_store(self._database, lambda: _new_files_dir(self.location), create)
        except BaseException:
            self._database.close()
            raise
        self.store_id = marker.store_id
        self._files_dir = marker.files_dir

    def _open_sqlite(self, upgrade: bool) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreUnusableError(
                f"Cannot make a store at {self.path}: its folder cannot be created ({error.strerror or error})."
            ) from None
        if self.path.is_dir():
            raise StoreUnusableError(f"Cannot use {self.path} as a det-estimator store: it is a directory.")
        if self.path.exists() and not self.path.is_file():
            # /dev/null or a pipe: SQLite fails on it with an unrelated message.
            raise StoreUnusableError(
                f"Cannot use {self.path} as a det-estimator store: it is not a regular file. Expected a store that "
                "det-estimator made (an SQLite database), or a path where there is none yet."
            )
        try:
            # Read before a byte is written: opening in WAL mode, or making the tables, changes the file.
            found = inspect_store_file(self.path)
            if found.kind == StoreFileKind.FOREIGN:
                raise StoreUnusableError(foreign_database_message(self.path, found.tables))
            self._database = Database(self.location, _LOCK_WAIT_SECONDS)
            connection = self._database.sqlite_connection()
            refuse_an_older_schema(connection, str(self.path), upgrade)
            enable_wal(connection, deadline=time.monotonic() + _LOCK_WAIT_SECONDS)
            self.schema = SchemaUpgrade(migrate(connection, str(self.path)), SCHEMA_VERSION)
            self.store_id = self._settle_home()
        except sqlite3.DatabaseError as error:
            # Reading the marker reaches past the first page, where a damaged store shows.
            damaged = damaged_store_error(self.path, error) if "malformed" in str(error) else None
            if damaged is not None:
                raise damaged from None
            # On a read-only file system SQLite cannot make the WAL index beside the store,
            # and says only "unable to open database file", even to read it.
            unwritable_folder = self.path.is_file() and not os.access(self.path.parent, os.W_OK)
            if "readonly" in str(error) or (isinstance(error, sqlite3.OperationalError) and unwritable_folder):
                raise StoreUnusableError(_read_only_message(self.path, error)) from None
            raise StoreUnusableError(
                f"Cannot use {self.path} as a det-estimator store: {error}. Expected a store that det-estimator "
                "made (an SQLite database), or a path where there is none yet."
            ) from None
        except StoreUnusableError:
            raise
        except StoreError as error:
            raise StoreUnusableError(str(error)) from None

    def _settle_home(self) -> str:
        """Reads the store's id, and tells a copy of a store that still exists; returns the id.

        The home recorded is the file the store was first opened as. A store found
        elsewhere is a copy while its home still holds a store of its id (both would
        write into the same folders), and was moved otherwise: its new place becomes its home.
        """
        row = self._database.read_one("SELECT store_id, home FROM store_info WHERE id = 1")
        assert row is not None
        store_id, home = str(row["store_id"]), row["home"]
        if home == str(self.path):
            return store_id
        if home is not None and Path(home) != self.path and holds_store(Path(home), store_id):
            self.copy_of = Path(home)
            return store_id
        with self._write() as db:
            db.execute("UPDATE store_info SET home = :home WHERE id = 1", {"home": str(self.path)})
        return store_id

    def _refuse_a_copy(self) -> None:
        if self.copy_of is not None:
            raise StoreCopyError(copy_message(self.path, self.copy_of, self.store_id))

    def check_writable(self, detaching: bool = False) -> None:
        """Raises :class:`StoreUnusableError` unless this process can write to the store.

        Called before a command that writes starts anything, so that a read-only store
        file or folder, or a copy of another store, fails at once rather than after
        training has begun.

        Args:
            detaching: the command is ``store detach``, the one write a copy takes.
        """
        if not detaching:
            self._refuse_a_copy()
        if not self.location.is_sqlite:
            self._database.check_writable()
            _check_files_dir(self.files_dir, self.location)
            return
        connection = self._database.sqlite_connection()
        try:
            connection.execute("BEGIN IMMEDIATE")
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            connection.execute(f"PRAGMA user_version = {int(version)}")
            connection.execute("ROLLBACK")
        except sqlite3.OperationalError as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            if is_locked(error):
                message = locked_message(self.location, error, _LOCK_WAIT_SECONDS, then="run the command again")
                raise StoreUnusableError(message) from None
            raise StoreUnusableError(_read_only_message(self.path, error)) from None

    @property
    def files_dir(self) -> Path:
        """The folder of this store's own files (logs, TensorBoard event files), beside the database."""
        if self._files_dir is not None:
            return self._files_dir
        return store_files_dir(self.path)

    def trial_dir(self, experiment_id: int, trial_id: int) -> Path:
        """Where a trial's output log and TensorBoard event files are kept."""
        return self.files_dir / "experiments" / str(experiment_id) / f"trial-{trial_id}"

    # Identity: the folders this store owns, and making a copy a store of its own.

    def own_folders(
        self, experiment_id: Optional[int], make: bool = True, trials: Optional[Sequence[TrialRecord]] = None
    ) -> None:
        """Claims for this store the folders a run of the experiment writes and deletes in.

        Those are the store's own files folder and each of the experiment's checkpoint
        folders (``experiment-<id>-<tag>``). A folder that no store owns yet is claimed:
        its owner file names this store; so is one whose owner was a store at this very
        path, which this store has replaced. Called before a run or a job begins, before
        retention deletes, and before leftovers are swept.

        Args:
            experiment_id: the experiment; None for the store's own files folder alone (a job's).
            make: make a missing folder (and claim it); else a missing one is left alone.
            trials: the experiment's trials, when the caller has read them already (a sweep
                of every experiment reads them all in one query); else they are read here.

        Raises:
            StoreCopyError: this store is a copy of a store that still exists.
            FolderOwnedError: a folder belongs to another store.
        """
        self._refuse_a_copy()
        if trials is None:
            trials = [] if experiment_id is None else self.trials(experiment_id)
        checkpoint_folders = {Path(trial.checkpoint_dir).parent for trial in trials}
        mine = FolderOwner(self.store_id, self.home)
        for folder in [self.files_dir, *sorted(checkpoint_folders)]:
            owner = folder_owner(folder)
            if owner is not None and owner.store_id != self.store_id and owner.store_path == self.home:
                # The store that owned it was this file, deleted and made anew since.
                owner = write_folder_owner(folder, mine)
            if owner is None:
                if not make and not folder.is_dir():
                    continue
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                    owner = write_folder_owner(folder, mine, replace=False)
                except OSError as error:
                    raise StoreUnusableError(
                        f"Cannot record the store {self.location} as the owner of the folder {folder}: "
                        f"{error.strerror or error}. Expected a folder this user can write."
                    ) from None
            if owner.store_id != self.store_id:
                raise FolderOwnedError(owned_folder_message(folder, owner, self.home, self.store_id))

    def detach(self) -> DetachReport:
        """Makes this store one of its own: a new id, and its own copies of the folders it shares.

        A copy of a store that still exists gets copies of all its experiments' checkpoint
        folders, under a new tag (``experiment-<id>-<new tag>``), and of their logs,
        beside itself; a store that meets folders of another store gets copies of those
        experiments' checkpoint folders. A copy holds just the checkpoints this store
        lists. Folders only it uses stay, and record its new id. Checkpoints it lists
        whose files are gone are recorded as deleted; in a copy, what runs (for the
        original) reads as interrupted once this process has ended. The folders are
        copied first and the store changed in one transaction, so a detach that is
        interrupted leaves the store as it was (and a partial copy, hidden).

        Raises:
            NothingToDetachError: the store is neither a copy nor meets another store's folders.
        """
        old_id = self.store_id
        plan = plan_detach(self.files_dir, old_id, self.copy_of, self.experiments(), self.trials, self.jobs())
        if not plan.new_tags and self.copy_of is None:
            raise NothingToDetachError(
                f"The store {self.location} is not a copy of another store, and no folder it uses belongs to another "
                "store: it is a store of its own already, and `store detach` has nothing to do."
            )
        mine = FolderOwner(secrets.token_hex(16), self.home)
        listed = {checkpoint.uuid for experiment_id in plan.new_tags for checkpoint in self.checkpoints(experiment_id)}
        copied = copy_for_detach(plan, mine, listed)
        gone: list[str] = []
        with self._write(detaching=True) as db:
            db.execute(
                "UPDATE store_info SET store_id = :store_id, home = :home WHERE id = 1",
                {"store_id": mine.store_id, "home": self.home},
            )
            if self.copy_of is not None:
                # What the copy shows running is run by the original's launcher, for the original:
                # this process becomes their launcher, and once it has ended they read as interrupted.
                for table in ("experiments", "jobs"):
                    pid, host, started = launcher_columns()
                    db.execute(
                        f"UPDATE {table} SET launcher_pid = :pid, launcher_host = :host, launcher_started = :started"
                        " WHERE state = :state",
                        {"pid": pid, "host": host, "started": started, "state": State.ACTIVE.value},
                    )
            for experiment_id, tag in plan.new_tags.items():
                db.execute(
                    "UPDATE experiments SET storage_tag = :tag WHERE id = :id", {"tag": tag, "id": experiment_id}
                )
            for row in db.rows("SELECT id, checkpoint_dir, log_path FROM trials"):
                db.execute(
                    "UPDATE trials SET checkpoint_dir = :checkpoint_dir, log_path = :log_path WHERE id = :id",
                    {
                        "checkpoint_dir": plan.moved(row["checkpoint_dir"]),
                        "log_path": plan.moved(row["log_path"]),
                        "id": row["id"],
                    },
                )
            for row in db.rows("SELECT id, log_path FROM jobs"):
                db.execute(
                    "UPDATE jobs SET log_path = :log_path WHERE id = :id",
                    {"log_path": plan.moved(row["log_path"]), "id": row["id"]},
                )
            for row in db.rows("SELECT uuid, path, state FROM checkpoints"):
                path, state = plan.moved(row["path"]), row["state"]
                if state == "COMPLETED" and not Path(path).is_dir():
                    state = "DELETED"
                    gone.append(row["uuid"])
                db.execute(
                    "UPDATE checkpoints SET path = :path, state = :state WHERE uuid = :uuid",
                    {"path": path, "state": state, "uuid": row["uuid"]},
                )
        self.store_id, self.copy_of = mine.store_id, None
        # Claimed once the store has its new id: a detach interrupted before leaves them as they were.
        self.files_dir.mkdir(parents=True, exist_ok=True)
        claimed = [self.files_dir, *plan.kept]
        for folder in claimed:
            write_folder_owner(folder, mine)
        return DetachReport(
            path=self.home,
            old_id=old_id,
            new_id=mine.store_id,
            copied=tuple((str(source), str(target)) for source, target in copied),
            claimed=tuple(str(folder) for folder in claimed),
            checkpoints_gone=tuple(gone),
        )

    def for_thread(self) -> "ExperimentStore":
        """A new connection to this store, for another thread: an SQLite connection serves the thread that opened it."""
        return ExperimentStore(self.location)

    def close(self) -> None:
        self._heartbeat.stop()
        self._database.close()

    def __enter__(self) -> "ExperimentStore":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _write(self, detaching: bool = False) -> Iterator[Transaction]:
        """One write transaction, holding the store's write lock; refused on a copy of another store."""
        if not detaching:
            self._refuse_a_copy()
        with self._database.write() as transaction:
            yield transaction

    # Experiments and trials.

    @retried
    def create_experiment(
        self,
        name: str,
        config: dict[str, Any],
        context_dir: str,
        entrypoint: str,
        slots: int,
        test: bool,
        command: Optional[list[str]] = None,
        hosts: Optional[Sequence[HostSlots]] = None,
        run_key: Optional[str] = None,
        trial_class: Optional[dict[str, Any]] = None,
    ) -> int:
        """Records a new ACTIVE experiment, run by this process until another claims it; returns its id.

        Were no launcher recorded, an experiment whose creating process died before its
        first run would read ACTIVE for ever, and ``experiment resume`` would refuse it.

        Args:
            name: its name.
            config: its config, defaults filled in.
            context_dir: the directory its code runs in.
            entrypoint: ``module:TrialClass`` or the command it runs, as shown.
            slots: processes per trial.
            test: one batch, one validation step and one checkpoint.
            command: the command a script experiment runs on each slot; None when
                det-estimator's worker runs the ``entrypoint`` trial class.
            hosts: the machines its processes run on; None for this one.
            run_key: the key a run that resumes by name finds it again by.
            trial_class: how a worker imports the trial class, when it is not the
                config's entrypoint (a class handed to ``run_trial``).

        Raises:
            StoreCopyError: this store is a copy of a store that still exists.
            FolderOwnedError: the store's files folder belongs to another store.
        """
        # Checked before the record, not at the run's start: an experiment that its run then
        # refused would stay listed (as failed) for an experiment that never ran.
        self.own_folders(None)
        with self._write() as db:
            pid, host, started = launcher_columns()
            experiment_id = db.insert(
                "INSERT INTO experiments (name, state, config, context_dir, entrypoint, command, slots, hosts,"
                " test_mode, created_at, run_key, storage_tag, trial_class, launcher_pid, launcher_host,"
                " launcher_started, launcher_seen_at) VALUES (:name, :state, :config, :context_dir, :entrypoint,"
                " :command, :slots, :hosts, :test_mode, :created_at, :run_key, :storage_tag, :trial_class,"
                f" :launcher_pid, :launcher_host, :launcher_started, {self._clock}) RETURNING id",
                {
                    "name": name,
                    "state": State.ACTIVE.value,
                    "config": json.dumps(config),
                    "context_dir": context_dir,
                    "entrypoint": entrypoint,
                    "command": None if command is None else json.dumps(command),
                    "slots": slots,
                    "hosts": format_hosts(hosts) if hosts else None,
                    "test_mode": int(test),
                    "created_at": time.time(),
                    "run_key": run_key,
                    "storage_tag": secrets.token_hex(4),
                    "trial_class": None if trial_class is None else json.dumps(trial_class),
                    "launcher_pid": pid,
                    "launcher_host": host,
                    "launcher_started": started,
                },
            )
        self._heartbeat.add(Launched("experiments", experiment_id))
        return experiment_id

    @retried
    def create_trial(
        self,
        experiment_id: int,
        hparams: dict[str, Any],
        seed: int,
        checkpoint_storage: Union[str, os.PathLike],
        max_batches: Optional[int] = None,
    ) -> int:
        """Records a new ACTIVE trial; returns its id.

        Its checkpoints go to :func:`trial_checkpoint_dir` under ``checkpoint_storage``
        (the config's ``checkpoint_storage`` directory, absolute).
        """
        with self._write() as db:
            tag = db.row("SELECT storage_tag FROM experiments WHERE id = :id", {"id": experiment_id})
            if tag is None:
                raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.location}.")
            trial_id = self._insert_trial(
                db, experiment_id, tag["storage_tag"], hparams, seed, checkpoint_storage, max_batches
            )
        return trial_id

    def _insert_trial(
        self,
        db: Transaction,
        experiment_id: int,
        tag: str,
        hparams: dict[str, Any],
        seed: int,
        checkpoint_storage: Union[str, os.PathLike],
        max_batches: Optional[int] = None,
    ) -> int:
        trial_id = db.insert(
            "INSERT INTO trials (experiment_id, state, hparams, seed, checkpoint_dir, log_path, max_batches,"
            " created_at) VALUES (:experiment_id, :state, :hparams, :seed, '', '', :max_batches, :created_at)"
            " RETURNING id",
            {
                "experiment_id": experiment_id,
                "state": State.ACTIVE.value,
                "hparams": json.dumps(hparams),
                "seed": seed,
                "max_batches": max_batches,
                "created_at": time.time(),
            },
        )
        checkpoint_dir = trial_checkpoint_dir(checkpoint_storage, experiment_id, tag, trial_id)
        log_path = self.trial_dir(experiment_id, trial_id) / "output.log"
        db.execute(
            "UPDATE trials SET checkpoint_dir = :checkpoint_dir, log_path = :log_path WHERE id = :id",
            {"checkpoint_dir": str(checkpoint_dir), "log_path": str(log_path), "id": trial_id},
        )
        return trial_id

    # Hyperparameter search.

    def searcher_state(self, experiment_id: int) -> Optional[dict[str, Any]]:
        """The experiment's search method state, as last saved, or None before the search starts."""
        found = self._database.read_one("SELECT searcher_state FROM experiments WHERE id = :id", {"id": experiment_id})
        return None if found is None or found["searcher_state"] is None else json.loads(found["searcher_state"])

    @retried
    def apply_search_step(
        self,
        experiment_id: int,
        state: dict[str, Any],
        checkpoint_storage: Union[str, os.PathLike],
        creates: Sequence[NewTrial] = (),
        assignments: Sequence[Assignment] = (),
    ) -> dict[int, int]:
        """Records one step of the search, all or nothing: its state, the trials it creates, what it tells them.

        A search that dies at any moment resumes from the last step recorded, so a step
        is one transaction.

        Args:
            experiment_id: the experiment.
            state: the search method's state after the step.
            checkpoint_storage: where new trials' checkpoints go (see :func:`trial_checkpoint_dir`).
            creates: the new trials.
            assignments: what each trial (new or not) trains towards next.

        Returns:
            Request id to trial id, for the new trials.
        """
        created = {}
        with self._write() as db:
            db.execute(
                "UPDATE experiments SET searcher_state = :state WHERE id = :id",
                {"state": json.dumps(state), "id": experiment_id},
            )
            found = db.row("SELECT storage_tag FROM experiments WHERE id = :id", {"id": experiment_id})
            if found is None:
                raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.location}.")
            tag = found["storage_tag"]
            for new in creates:
                trial_id = self._insert_trial(db, experiment_id, tag, new.hparams, new.seed, checkpoint_storage)
                db.execute(
                    "UPDATE trials SET request_id = :request_id, search_state = :search_state WHERE id = :id",
                    {"request_id": new.request_id, "search_state": SearchState.QUEUED.value, "id": trial_id},
                )
                created[new.request_id] = trial_id
            for assignment in assignments:
                fields = "target_length = :target_length, search_state = :search_state"
                values: dict[str, Any] = {
                    "target_length": assignment.target_length,
                    "search_state": SearchState(assignment.search_state).value,
                    "experiment_id": experiment_id,
                    "request_id": assignment.request_id,
                }
                if assignment.answered_length is not None:
                    fields += ", answered_length = :answered_length"
                    values["answered_length"] = assignment.answered_length
                db.execute(
                    f"UPDATE trials SET {fields} WHERE experiment_id = :experiment_id AND request_id = :request_id",
                    values,
                )
        return created

    @retried
    def adopt_trial(self, trial_id: int, request_id: int) -> None:
        """Makes a trial recorded outside a search (by ``core.init()``, or an older store) its ``request_id``."""
        with self._write() as db:
            db.execute(
                "UPDATE trials SET request_id = :request_id WHERE id = :id", {"request_id": request_id, "id": trial_id}
            )

    @retried
    def set_search_state(self, trial_id: int, search_state: SearchState) -> None:
        """Records where a trial stands in its search (it started, or ended early)."""
        with self._write() as db:
            db.execute(
                "UPDATE trials SET search_state = :search_state WHERE id = :id",
                {"search_state": SearchState(search_state).value, "id": trial_id},
            )

    @retried
    def report_search_metric(self, trial_id: int, length: int, metric: Any) -> None:
        """The trial completed the operation of ``length`` with this searcher metric; the search answers later."""
        with self._write() as db:
            db.execute(
                "UPDATE trials SET reported_length = :length, reported_metric = :metric WHERE id = :id",
                {"length": length, "metric": json.dumps(metric), "id": trial_id},
            )

    @retried
    def count_restart(self, trial_id: int, failed_run_id: Optional[int] = None, cause: str = "") -> int:
        """Counts one more automatic restart of a failed trial, with its cause; returns how many it has had.

        Args:
            trial_id: the trial restarted.
            failed_run_id: the run whose failure causes the restart (recorded with ``cause``).
            cause: the failing rank's error line.
        """
        with self._write() as db:
            db.execute("UPDATE trials SET restarts = restarts + 1 WHERE id = :id", {"id": trial_id})
            found = db.row("SELECT restarts FROM trials WHERE id = :id", {"id": trial_id})
            if found is None:
                raise UnknownIdError(f"There is no trial {trial_id} in the store {self.location}.")
            number = int(found["restarts"])
            if failed_run_id is not None:
                db.execute(
                    "INSERT INTO trial_restarts (trial_id, failed_run_id, number, cause, restarted_at)"
                    " VALUES (:trial_id, :failed_run_id, :number, :cause, :restarted_at)",
                    {
                        "trial_id": trial_id,
                        "failed_run_id": failed_run_id,
                        "number": number,
                        "cause": cause,
                        "restarted_at": time.time(),
                    },
                )
            return number

    def restarts(self, trial_id: int) -> list[RestartRecord]:
        """The trial's automatic restarts, first first."""
        rows = self._database.read("SELECT * FROM trial_restarts WHERE trial_id = :id ORDER BY id", {"id": trial_id})
        return [
            RestartRecord(row["trial_id"], row["failed_run_id"], row["number"], row["cause"], row["restarted_at"])
            for row in rows
        ]

    @retried
    def claim(self, experiment_id: int, pid: Optional[int] = None) -> None:
        """Makes process ``pid`` (default: this one) the experiment's launcher, if no live one is.

        One launcher at a time runs an experiment: a second ``experiment resume`` of it,
        while the first still runs, is refused. A launcher that died (killed, or its
        machine rebooted) no longer counts, so the claim survives crashes.

        The claim is taken under the store's write lock, so of several processes claiming
        at once (on any machines) exactly one wins. From then on this process refreshes
        the experiment's heartbeat, until it pauses or ends it (see ``_launchers``).

        Raises:
            ExperimentBusyError: another live process runs it (on another machine: one whose
                heartbeat is younger than the lease).
        """
        pid, host, started = launcher_columns(pid)
        with self._write() as db:
            row = db.row(
                "SELECT e.launcher_pid, e.launcher_host, e.launcher_started,"
                f" {launcher_silence(self.location.is_sqlite, 'e')} FROM experiments e WHERE e.id = :id",
                {"id": experiment_id},
            )
            if row is None:
                raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.location}.")
            current, current_host = row["launcher_pid"], row["launcher_host"]
            if (
                current is not None
                and (current, current_host) != (pid, host)
                and launcher_alive(current, current_host, row["launcher_started"], row["launcher_silence"])
            ):
                where = "this machine" if current_host == host else current_host
                raise ExperimentBusyError(
                    f"Experiment {experiment_id} is being run by process {current} on {where}; one launcher at a "
                    "time runs an experiment. Wait for it to end, or pause it first."
                )
            db.execute(
                "UPDATE experiments SET launcher_pid = :pid, launcher_host = :host, launcher_started = :started,"
                f" launcher_seen_at = {self._clock}, pause_requested_at = NULL WHERE id = :id",
                {"pid": pid, "host": host, "started": started, "id": experiment_id},
            )
            if current is not None and (current, current_host) != (pid, host):
                _end_runs_of_a_dead_launcher(db, experiment_id)
        self._beat_if_mine(Launched("experiments", experiment_id), pid)

    @retried
    def set_launcher(self, experiment_id: int, pid: int) -> None:
        """Records the process that runs the experiment now, with a fresh heartbeat, without checking for another."""
        launcher_pid, host, started = launcher_columns(pid)
        with self._write() as db:
            db.execute(
                "UPDATE experiments SET launcher_pid = :pid, launcher_host = :host, launcher_started = :started,"
                f" launcher_seen_at = {self._clock} WHERE id = :id",
                {"pid": launcher_pid, "host": host, "started": started, "id": experiment_id},
            )
        self._beat_if_mine(Launched("experiments", experiment_id), pid)

    def _beat_if_mine(self, launched: Launched, pid: int) -> None:
        """Refreshes the heartbeat of ``launched`` from now on if this process is its launcher ``pid``; else no more."""
        if pid == os.getpid():
            self._heartbeat.add(launched)
        else:
            self._heartbeat.discard(launched)

    def refresh_heartbeats(self, launched: Collection[Launched]) -> set[Launched]:
        """Refreshes the heartbeat of those of ``launched`` still launched by this process; returns them.

        Called every ``HEARTBEAT_SECONDS`` by the thread of :class:`LauncherHeartbeat`,
        through a connection of its own. A record claimed by another launcher (once this
        one's lease ran out) is left alone, and not returned. (A record this process
        pauses or ends stops being beaten then, see :meth:`set_state`; its state is not
        asked here, as a claim makes a paused experiment this process's before it makes
        it ACTIVE.)
        """
        pid, host, _ = launcher_columns()
        kept = set()
        with self._write() as db:
            for each in sorted(launched, key=lambda record: (record.table, record.id)):
                refreshed = db.row(
                    f"UPDATE {each.table} SET launcher_seen_at = {self._clock} WHERE id = :id AND launcher_pid = :pid"
                    " AND launcher_host = :host RETURNING id",
                    {"id": each.id, "pid": pid, "host": host},
                )
                if refreshed is not None:
                    kept.add(each)
        return kept

    @retried
    def set_state(self, experiment_id: int, state: State) -> None:
        """Sets an experiment's state; a final state records the time, and reaches its trials still ACTIVE.

        Trials that ended on their own (completed, stopped by the search, failed) keep
        their state.
        """
        state = State(state)
        ended = time.time() if state.is_final else None
        if state != State.ACTIVE:
            self._heartbeat.discard(Launched("experiments", experiment_id))
        with self._write() as db:
            db.execute(
                "UPDATE experiments SET state = :state, ended_at = :ended WHERE id = :id",
                {"state": state.value, "ended": ended, "id": experiment_id},
            )
            if state.is_final:
                db.execute(
                    "UPDATE trials SET state = :state, ended_at = :ended WHERE experiment_id = :id AND state = :active",
                    {"state": state.value, "ended": ended, "id": experiment_id, "active": State.ACTIVE.value},
                )

    @retried
    def update_experiment(self, experiment_id: int, config: dict[str, Any], slots: int, test: bool) -> None:
        """Replaces the config of an experiment run again under the same run key (its length may have grown)."""
        with self._write() as db:
            db.execute(
                "UPDATE experiments SET config = :config, slots = :slots, test_mode = :test_mode WHERE id = :id",
                {"config": json.dumps(config), "slots": slots, "test_mode": int(test), "id": experiment_id},
            )

    @retried
    def set_trial_state(self, trial_id: int, state: State) -> None:
        """Sets the state of one trial; a final state records the time."""
        state = State(state)
        with self._write() as db:
            db.execute(
                "UPDATE trials SET state = :state, ended_at = :ended WHERE id = :id",
                {"state": state.value, "ended": time.time() if state.is_final else None, "id": trial_id},
            )

    @retried
    def request_pause(self, experiment_id: int) -> None:
        """Asks the experiment's launcher to have its trials checkpoint and stop."""
        with self._write() as db:
            db.execute(
                "UPDATE experiments SET pause_requested_at = :now WHERE id = :id",
                {"now": time.time(), "id": experiment_id},
            )

    @retried
    def set_progress(self, trial_id: int, batches_trained: int, max_batches: Optional[int] = None) -> None:
        """Records how far a trial is, and (when given) how many batches it trains in all."""
        with self._write() as db:
            if max_batches is None:
                db.execute(
                    "UPDATE trials SET batches_trained = :batches WHERE id = :id",
                    {"batches": batches_trained, "id": trial_id},
                )
            else:
                db.execute(
                    "UPDATE trials SET batches_trained = :batches, max_batches = :max_batches WHERE id = :id",
                    {"batches": batches_trained, "max_batches": max_batches, "id": trial_id},
                )

    # Runs of a trial.

    @retried
    def start_run(self, trial_id: int, start_batches: int = 0) -> int:
        """Records that a run of the trial (a launch, resume or restart) starts, after ``start_batches``.

        Returns:
            The run's id.
        """
        with self._write() as db:
            return db.insert(
                "INSERT INTO trial_runs (trial_id, started_at, state, start_batches)"
                " VALUES (:trial_id, :started_at, :state, :start_batches) RETURNING id",
                {
                    "trial_id": trial_id,
                    "started_at": time.time(),
                    "state": State.ACTIVE.value,
                    "start_batches": start_batches,
                },
            )

    @retried
    def acknowledge_preemption(self, run_id: int) -> None:
        """Records that the run stops because it was asked to pause, not because it is done."""
        with self._write() as db:
            db.execute("UPDATE trial_runs SET preempted = 1 WHERE id = :id", {"id": run_id})

    @retried
    def record_run_error(self, run_id: int, error: dict[str, Any]) -> None:
        """Records the error that ended a run.

        The first one recorded wins (later ones are its consequences), except that an
        error marked ``consequence`` (a process whose peer died) gives way to the
        error of the process that died first, whichever recorded first.
        """
        with self._write() as db:
            # Read and decided here, in the write's transaction: no JSON function is common to both databases.
            found = db.row("SELECT error FROM trial_runs WHERE id = :id", {"id": run_id})
            if found is None:
                return
            recorded = None if found["error"] is None else json.loads(found["error"])
            if recorded is None or (not error.get("consequence") and recorded.get("consequence")):
                db.execute(
                    "UPDATE trial_runs SET error = :error WHERE id = :id", {"error": json.dumps(error), "id": run_id}
                )

    @retried
    def end_run(self, run_id: int, state: State, exit_status: Optional[int] = None) -> None:
        """Records how a run ended (and its processes' exit status, when they were launched)."""
        with self._write() as db:
            db.execute(
                "UPDATE trial_runs SET state = :state, ended_at = :ended, exit_status = :exit_status WHERE id = :id",
                {"state": State(state).value, "ended": time.time(), "exit_status": exit_status, "id": run_id},
            )

    # Metrics and checkpoints.

    @retried
    def record_metrics(
        self,
        trial_id: int,
        kind: MetricKind,
        batches: int,
        metrics: dict[str, Any],
        run_id: Optional[int] = None,
    ) -> None:
        """Records a workload's training metrics (``kind="training"``) or a validation's."""
        with self._write() as db:
            db.execute(
                "INSERT INTO metrics (trial_id, kind, batches, metrics, recorded_at, run_id)"
                " VALUES (:trial_id, :kind, :batches, :metrics, :recorded_at, :run_id)",
                {
                    "trial_id": trial_id,
                    "kind": MetricKind(kind).value,
                    "batches": batches,
                    "metrics": json.dumps(metrics),
                    "recorded_at": time.time(),
                    "run_id": run_id,
                },
            )
            db.execute(
                "UPDATE trials SET batches_trained = :batches WHERE id = :id AND batches_trained < :batches",
                {"batches": batches, "id": trial_id},
            )

    @retried
    def record_checkpoint(
        self,
        trial_id: int,
        uuid: str,
        batches: int,
        path: str,
        size_bytes: int,
        metadata: dict[str, Any],
        run_id: Optional[int] = None,
    ) -> None:
        """Records a sealed checkpoint."""
        with self._write() as db:
            db.execute(
                "INSERT INTO checkpoints (uuid, trial_id, batches, path, size_bytes, metadata, state, created_at,"
                " run_id) VALUES (:uuid, :trial_id, :batches, :path, :size_bytes, :metadata, 'COMPLETED',"
                " :created_at, :run_id) ON CONFLICT (uuid) DO UPDATE SET trial_id = excluded.trial_id,"
                " batches = excluded.batches, path = excluded.path, size_bytes = excluded.size_bytes,"
                " metadata = excluded.metadata, state = excluded.state, created_at = excluded.created_at,"
                " run_id = excluded.run_id",
                {
                    "uuid": uuid,
                    "trial_id": trial_id,
                    "batches": batches,
                    "path": path,
                    "size_bytes": size_bytes,
                    "metadata": json.dumps(metadata),
                    "created_at": time.time(),
                    "run_id": run_id,
                },
            )

    @retried
    def record_checkpoint_validation(
        self, uuid: str, metrics: dict[str, Any], size_bytes: Optional[int] = None
    ) -> None:
        """Adds validation metrics, reported after the checkpoint was recorded, to its metadata.

        Args:
            uuid: the checkpoint.
            metrics: its validation metrics.
            size_bytes: its size now, when writing the metrics into its ``metadata.json``
                changed it; None keeps the recorded size.
        """
        with self._write() as db:
            row = db.row("SELECT metadata, size_bytes FROM checkpoints WHERE uuid = :uuid", {"uuid": uuid})
            if row is not None:
                metadata = {**json.loads(row["metadata"]), "validation_metrics": metrics}
                db.execute(
                    "UPDATE checkpoints SET metadata = :metadata, size_bytes = :size_bytes WHERE uuid = :uuid",
                    {
                        "metadata": json.dumps(metadata),
                        "size_bytes": row["size_bytes"] if size_bytes is None else size_bytes,
                        "uuid": uuid,
                    },
                )

    @retried
    def mark_checkpoints_deleted(self, uuids: list[str]) -> None:
        """Records that retention deleted these checkpoints' files."""
        with self._write() as db:
            db.execute_many(
                "UPDATE checkpoints SET state = 'DELETED' WHERE uuid = :uuid", [{"uuid": uuid} for uuid in uuids]
            )

    # Reading.

    def experiments(self) -> list[ExperimentRecord]:
        """Every experiment, oldest first, with its trials' progress."""
        rows = self._database.read(f"{self._reads.experiments} GROUP BY e.id ORDER BY e.id")
        return [_experiment_record(row) for row in rows]

    def experiment(self, experiment_id: int) -> ExperimentRecord:
        """One experiment.

        Raises:
            UnknownIdError: there is no experiment ``experiment_id``.
        """
        row = self._database.read_one(
            f"{self._reads.experiments} WHERE e.id = :id GROUP BY e.id", {"id": experiment_id}
        )
        if row is None:
            raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.location}.")
        return _experiment_record(row)

    def find_experiment(self, run_key: str) -> Optional[ExperimentRecord]:
        """The latest experiment recorded with ``run_key``, if any."""
        row = self._database.read_one(
            "SELECT id FROM experiments WHERE run_key = :run_key ORDER BY id DESC LIMIT 1", {"run_key": run_key}
        )
        return None if row is None else self.experiment(row["id"])

    def trials(self, experiment_id: int) -> list[TrialRecord]:
        """An experiment's trials, oldest first."""
        rows = self._database.read(
            f"{self._reads.trials} WHERE t.experiment_id = :id ORDER BY t.id", {"id": experiment_id}
        )
        return [_trial_record(row) for row in rows]

    def all_trials(self) -> list[TrialRecord]:
        """Every experiment's trials, oldest first, in one query (for what looks at every experiment at once)."""
        rows = self._database.read(f"{self._reads.trials} ORDER BY t.id")
        return [_trial_record(row) for row in rows]

    def trial(self, trial_id: int) -> TrialRecord:
        """One trial.

        Raises:
            UnknownIdError: there is no trial ``trial_id``.
        """
        row = self._database.read_one(f"{self._reads.trials} WHERE t.id = :id", {"id": trial_id})
        if row is None:
            raise UnknownIdError(f"There is no trial {trial_id} in the store {self.location}.")
        return _trial_record(row)

    def trial_runs(self, trial_id: int) -> list[TrialRunRecord]:
        """A trial's runs, oldest first."""
        rows = self._database.read(f"{self._reads.runs} WHERE r.trial_id = :id ORDER BY r.id", {"id": trial_id})
        return [_run_record(row) for row in rows]

    def trial_run(self, run_id: int) -> TrialRunRecord:
        """One run of a trial."""
        row = self._database.read_one(f"{self._reads.runs} WHERE r.id = :id", {"id": run_id})
        if row is None:
            raise UnknownIdError(f"There is no trial run {run_id} in the store {self.location}.")
        return _run_record(row)

    def metrics(
        self, trial_id: int, kind: MetricKind, run_id: Optional[int] = None, after_id: int = 0
    ) -> list[MetricRecord]:
        """A trial's training or validation metrics, in the order of the batches.

        Those of a run past the checkpoint a later run of the trial started from (a
        restart, or a resume after the launcher was killed) are left out: the later run
        trained those batches again.

        Args:
            trial_id: the trial.
            kind: training or validation metrics.
            run_id: only those of this run of the trial.
            after_id: only those recorded after the metric record with this id (for
                following a run as it goes).
        """
        query = (
            "SELECT m.* FROM metrics m WHERE m.trial_id = :trial_id AND m.kind = :kind AND m.id > :after_id"
            f" AND {_NOT_ROLLED_BACK}"
        )
        parameters: dict[str, Any] = {"trial_id": trial_id, "kind": MetricKind(kind).value, "after_id": after_id}
        if run_id is not None:
            query += " AND m.run_id = :run_id"
            parameters["run_id"] = run_id
        rows = self._database.read(query + " ORDER BY m.batches, m.id", parameters)
        return [_metric_record(row) for row in rows]

    def experiment_metrics(self, experiment_id: int, kind: MetricKind) -> list[MetricRecord]:
        """Every trial's training or validation metrics of an experiment, by trial and then batches.

        One query for all the trials (a page that draws a search's curves needs them all at
        once); the rows left out are those :meth:`metrics` leaves out.
        """
        rows = self._database.read(
            "SELECT m.id, m.trial_id, m.batches, m.metrics, m.recorded_at, m.run_id FROM metrics m"
            " JOIN trials t ON t.id = m.trial_id WHERE t.experiment_id = :experiment_id AND m.kind = :kind"
            f" AND {_NOT_ROLLED_BACK} ORDER BY m.trial_id, m.batches, m.id",
            {"experiment_id": experiment_id, "kind": MetricKind(kind).value},
        )
        # Built here rather than by _metric_record: a large search has hundreds of thousands of rows, all of one kind.
        kind = MetricKind(kind)
        return [
            MetricRecord(
                row["id"],
                row["trial_id"],
                kind,
                row["batches"],
                json.loads(row["metrics"]),
                row["recorded_at"],
                row["run_id"],
            )
            for row in rows
        ]

    def checkpoints(
        self, experiment_id: int, include_deleted: bool = False, trial_id: Optional[int] = None
    ) -> list[CheckpointRecord]:
        """An experiment's checkpoints (or one trial's), oldest first: only those still on disk unless asked."""
        query = (
            "SELECT c.* FROM checkpoints c JOIN trials t ON c.trial_id = t.id WHERE t.experiment_id = :experiment_id"
        )
        parameters: dict[str, Any] = {"experiment_id": experiment_id}
        if trial_id is not None:
            query += " AND c.trial_id = :trial_id"
            parameters["trial_id"] = trial_id
        if not include_deleted:
            query += " AND c.state = 'COMPLETED'"
        rows = self._database.read(query + " ORDER BY c.batches, c.created_at", parameters)
        return [_checkpoint_record(row) for row in rows]

    def checkpoint(self, uuid: str) -> CheckpointRecord:
        """One checkpoint, by its uuid.

        Raises:
            UnknownIdError: the store records no checkpoint ``uuid``.
        """
        row = self._database.read_one("SELECT * FROM checkpoints WHERE uuid = :uuid", {"uuid": uuid})
        if row is None:
            raise UnknownIdError(f"There is no checkpoint {uuid} in the store {self.location}.")
        return _checkpoint_record(row)

    def checkpoints_starting_with(self, prefix: str, limit: int) -> list[CheckpointRecord]:
        """Up to ``limit`` checkpoints whose uuid starts with ``prefix`` (an exact uuid included), by uuid."""
        rows = self._database.read(
            "SELECT * FROM checkpoints WHERE substr(uuid, 1, CAST(:length AS INTEGER)) = :prefix ORDER BY uuid"
            " LIMIT CAST(:limit AS INTEGER)",
            {"length": len(prefix), "prefix": prefix, "limit": limit},
        )
        return [_checkpoint_record(row) for row in rows]

    def best_checkpoints(self, experiment_id: int, metric: str, smaller_is_better: bool, count: int) -> set[str]:
        """The uuids of the experiment's ``count`` best checkpoints still on disk, over all its trials.

        Ranked by ``validation_metrics[metric]``; a checkpoint without a numeric, non-NaN
        value is never among them, and between equal values the more recent one wins.
        """
        ranked = []
        for record in self.checkpoints(experiment_id):
            value = (record.validation_metrics or {}).get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                ranked.append((value if smaller_is_better else -value, -record.created_at, record.uuid))
        return {uuid for _, _, uuid in sorted(ranked)[:count]}

    def best_validation(self, experiment_id: int, trial_id: Optional[int] = None) -> Optional[BestValidation]:
        """The best value of the experiment's searcher metric over all its trials' validations (or one trial's).

        Between equal values the more recent validation wins, as it does for the checkpoints
        kept as best (:meth:`best_checkpoints`), so the summary names the one kept.
        """
        experiment = self.experiment(experiment_id)
        query = (
            "SELECT m.trial_id, m.batches, m.metrics FROM metrics m JOIN trials t ON t.id = m.trial_id"
            f" WHERE t.experiment_id = :experiment_id AND m.kind = 'validation' AND {_NOT_ROLLED_BACK}"
        )
        parameters: dict[str, Any] = {"experiment_id": experiment_id}
        if trial_id is not None:
            query += " AND m.trial_id = :trial_id"
            parameters["trial_id"] = trial_id
        best = _BestSoFar(experiment)
        for row in self._database.read(query + " ORDER BY m.id", parameters):
            best.see(row)
        return best.best

    def best_validations(self, experiments: Sequence[ExperimentRecord]) -> dict[int, Optional[BestValidation]]:
        """:meth:`best_validation` of each of ``experiments``, by id, read in one query.

        For the pages that list every experiment: one query per experiment would take
        seconds for a store of a thousand.
        """
        best = {experiment.id: _BestSoFar(experiment) for experiment in experiments}
        rows = self._database.read(
            "SELECT t.experiment_id, m.trial_id, m.batches, m.metrics FROM metrics m JOIN trials t ON t.id = m.trial_id"
            f" WHERE m.kind = 'validation' AND {_NOT_ROLLED_BACK} ORDER BY m.id",
            {},
        )
        for row in rows:
            of_experiment = best.get(row["experiment_id"])
            if of_experiment is not None:
                of_experiment.see(row)
        return {experiment_id: of_experiment.best for experiment_id, of_experiment in best.items()}


class _BestSoFar:
    """The best validation of an experiment's searcher metric among the metric rows seen, in the order recorded."""

    def __init__(self, experiment: ExperimentRecord) -> None:
        self._metric, self._smaller = experiment.searcher_metric, experiment.smaller_is_better
        self.best: Optional[BestValidation] = None

    def see(self, row: RowMapping) -> None:
        # Parsed here, not with the database's JSON functions, which refuse the NaN a metric may hold.
        value = json.loads(row["metrics"]).get(self._metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:  # NaN
            return
        if self.best is None or (value <= self.best.value if self._smaller else value >= self.best.value):
            self.best = BestValidation(self._metric, float(value), row["batches"], row["trial_id"])


def _state_as_seen(row: RowMapping) -> State:
    """The row's state as seen now (:func:`state_as_seen`); the row joins the experiment's launcher and its silence."""
    return state_as_seen(
        State(row["state"]),
        row["launcher_pid"],
        row["launcher_host"],
        row["launcher_started"],
        row["launcher_silence"],
    )


def _experiment_record(row: RowMapping) -> ExperimentRecord:
    return ExperimentRecord(
        id=row["id"],
        name=row["name"],
        state=_state_as_seen(row),
        config=json.loads(row["config"]),
        context_dir=row["context_dir"],
        entrypoint=row["entrypoint"],
        command=None if row["command"] is None else json.loads(row["command"]),
        slots=row["slots"],
        hosts=tuple(parse_hosts(row["hosts"])) if row["hosts"] else None,
        test=bool(row["test_mode"]),
        created_at=row["created_at"],
        ended_at=row["ended_at"],
        launcher_pid=row["launcher_pid"],
        launcher_host=row["launcher_host"],
        run_key=row["run_key"],
        pause_requested_at=row["pause_requested_at"],
        trial_class=None if row["trial_class"] is None else json.loads(row["trial_class"]),
        batches_trained=row["batches_trained"],
        max_batches=row["max_batches"],
        num_trials=row["num_trials"],
    )


def _trial_record(row: RowMapping) -> TrialRecord:
    return TrialRecord(
        id=row["id"],
        experiment_id=row["experiment_id"],
        state=_state_as_seen(row),
        hparams=json.loads(row["hparams"]),
        seed=row["seed"],
        checkpoint_dir=row["checkpoint_dir"],
        log_path=row["log_path"],
        batches_trained=row["batches_trained"],
        max_batches=row["max_batches"],
        created_at=row["created_at"],
        ended_at=row["ended_at"],
        request_id=row["request_id"],
        search_state=None if row["search_state"] is None else SearchState(row["search_state"]),
        target_length=row["target_length"],
        reported_length=row["reported_length"],
        reported_metric=None if row["reported_metric"] is None else json.loads(row["reported_metric"]),
        answered_length=row["answered_length"],
        restarts=row["restarts"],
    )


def _metric_record(row: RowMapping) -> MetricRecord:
    return MetricRecord(
        id=row["id"],
        trial_id=row["trial_id"],
        kind=MetricKind(row["kind"]),
        batches=row["batches"],
        metrics=json.loads(row["metrics"]),
        recorded_at=row["recorded_at"],
        run_id=row["run_id"],
    )


def _checkpoint_record(row: RowMapping) -> CheckpointRecord:
    metadata = json.loads(row["metadata"])
    return CheckpointRecord(
        uuid=row["uuid"],
        trial_id=row["trial_id"],
        batches=row["batches"],
        state=row["state"],
        validation_metrics=metadata.get("validation_metrics"),
        size_bytes=row["size_bytes"],
        path=row["path"],
        created_at=row["created_at"],
        run_id=row["run_id"],
        metadata=metadata,
    )


def _end_runs_of_a_dead_launcher(db: Transaction, experiment_id: int) -> None:
    """Ends as INTERRUPTED the runs still ACTIVE, which died with their launcher, as the launcher would have.

    They read as INTERRUPTED already (:func:`_run_record`), and must not read as ACTIVE
    again once a new launcher runs. Their trials' progress goes back to the latest
    checkpoint, where a resume continues.
    """
    active = (
        "SELECT r.trial_id FROM trial_runs r JOIN trials t ON t.id = r.trial_id"
        " WHERE r.state = 'ACTIVE' AND t.experiment_id = :experiment_id"
    )
    db.execute(
        "UPDATE trials SET batches_trained = COALESCE((SELECT MAX(c.batches) FROM checkpoints c"
        f" WHERE c.trial_id = trials.id AND c.state = 'COMPLETED'), 0) WHERE id IN ({active})",
        {"experiment_id": experiment_id},
    )
    db.execute(
        f"UPDATE trial_runs SET state = :state, ended_at = :ended WHERE state = 'ACTIVE' AND trial_id IN ({active})",
        {"state": State.INTERRUPTED.value, "ended": time.time(), "experiment_id": experiment_id},
    )


# A metric ``m`` that a later run of its trial trained again: that run started from a
# checkpoint before it, so the model it was measured on is gone, and the later run
# records its own in its place (as the reference archives a restarted trial's metrics).
_NOT_ROLLED_BACK = (
    "NOT EXISTS (SELECT 1 FROM trial_runs later WHERE later.trial_id = m.trial_id AND later.id > m.run_id"
    " AND later.start_batches < m.batches)"
)


@dataclass(frozen=True)
class _Reads:
    """The queries that read a record's state as seen: with its experiment's launcher, and that launcher's silence.

    A run is read with its experiment's launcher, which an ACTIVE run cannot outlive. The
    silence is measured by the database's clock, whose SQL differs between the databases.
    """

    experiments: str
    trials: str
    runs: str

    @classmethod
    def of(cls, is_sqlite: bool) -> "_Reads":
        silence = launcher_silence(is_sqlite, "e")
        launcher = f"e.launcher_pid, e.launcher_host, e.launcher_started, {silence}"
        return cls(
            # An experiment with the sums of its trials' progress (see ExperimentRecord).
            experiments=(
                f"SELECT e.*, {silence}, CAST(COALESCE(SUM(t.batches_trained), 0) AS BIGINT) AS batches_trained,"
                " MAX(t.max_batches) AS max_batches, COUNT(t.id) AS num_trials"
                " FROM experiments e LEFT JOIN trials t ON t.experiment_id = e.id"
            ),
            trials=f"SELECT t.*, {launcher} FROM trials t JOIN experiments e ON e.id = t.experiment_id",
            runs=(
                f"SELECT r.*, {launcher} FROM trial_runs r"
                " JOIN trials t ON t.id = r.trial_id JOIN experiments e ON e.id = t.experiment_id"
            ),
        )


def _run_record(row: RowMapping) -> TrialRunRecord:
    return TrialRunRecord(
        id=row["id"],
        trial_id=row["trial_id"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        state=_state_as_seen(row),
        preempted=bool(row["preempted"]),
        exit_status=row["exit_status"],
        start_batches=row["start_batches"],
        error=None if row["error"] is None else json.loads(row["error"]),
    )
