"""ExperimentStore: experiments, trials, metrics and checkpoints in one SQLite file."""

import contextlib
import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator.store._schema import StoreError, migrate

STORE_VARIABLE = "DET_ESTIMATOR_STORE"

# Experiment and trial states.
ACTIVE, PAUSED, COMPLETED, ERROR = "ACTIVE", "PAUSED", "COMPLETED", "ERROR"
# Shown for an ACTIVE experiment whose launcher no longer runs (killed, or its machine
# went down): it can be resumed from its latest checkpoint.
INTERRUPTED = "INTERRUPTED"


def default_store_path() -> Path:
    """``$DET_ESTIMATOR_STORE``, else ``$XDG_DATA_HOME/det-estimator/store.sqlite``.

    ``XDG_DATA_HOME`` defaults to ``~/.local/share``, so each user has a store of their own.
    """
    explicit = os.environ.get(STORE_VARIABLE)
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "det-estimator" / "store.sqlite"


class UnknownIdError(StoreError, LookupError):
    """No experiment, trial or checkpoint has the id given."""


class ExperimentStore:
    """The record of every experiment run on this store.

    SQLite in WAL mode: readers never block the writer, and several processes (two
    experiments at once, or the ranks' chief and the command) write safely; each write
    is one short transaction that waits for the others rather than failing.

    Args:
        path: the database file (default :func:`default_store_path`); created, with its
            directory, if missing.

    Raises:
        StoreError: the file is not a det-estimator store, or of a newer schema.
    """

    def __init__(self, path: Union[str, os.PathLike, None] = None) -> None:
        # Absolute: the experiment's processes run in its context directory, not here.
        self.path = (Path(path).expanduser() if path is not None else default_store_path()).resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._connection = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
            self._connection.row_factory = sqlite3.Row
            _enable_wal(self._connection, deadline=time.monotonic() + 60.0)
            self._connection.execute("PRAGMA foreign_keys = ON")
            migrate(self._connection, str(self.path))
        except sqlite3.DatabaseError as error:
            raise StoreError(f"Cannot use {self.path} as a det-estimator store: {error}") from error

    def trial_dir(self, experiment_id: int, trial_id: int) -> Path:
        """Where a trial's output log and TensorBoard event files are kept, beside the database."""
        return self.path.parent / "experiments" / str(experiment_id) / f"trial-{trial_id}"

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "ExperimentStore":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._connection.execute("BEGIN IMMEDIATE")
        try:
            yield self._connection
            self._connection.execute("COMMIT")
        except BaseException:
            self._connection.execute("ROLLBACK")
            raise

    # Writing.

    def create_experiment(
        self,
        name: str,
        config: dict[str, Any],
        context_dir: str,
        entrypoint: str,
        slots: int,
        test: bool,
        command: Optional[list[str]] = None,
        hosts: Optional[str] = None,
    ) -> int:
        """Records a new ACTIVE experiment; returns its id.

        ``command`` is the script a native-API experiment runs on each process; None
        for an ``EstimatorTrial`` experiment, whose ``entrypoint`` names the class.
        ``hosts`` (``"host1:2,host2:2"``) are the machines its processes run on; None for
        this one.
        """
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO experiments (name, state, config, context_dir, entrypoint, command, slots, hosts,"
                " test_mode, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    ACTIVE,
                    json.dumps(config),
                    context_dir,
                    entrypoint,
                    None if command is None else json.dumps(command),
                    slots,
                    hosts,
                    int(test),
                    time.time(),
                ),
            )
            return int(cursor.lastrowid)

    def create_trial(
        self,
        experiment_id: int,
        hparams: dict[str, Any],
        seed: int,
        checkpoint_dir: str,
        max_batches: Optional[int] = None,
    ) -> int:
        """Records a new ACTIVE trial of an experiment; returns its id."""
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO trials (experiment_id, state, hparams, seed, checkpoint_dir, log_path, max_batches,"
                " created_at) VALUES (?, ?, ?, ?, ?, '', ?, ?)",
                (experiment_id, ACTIVE, json.dumps(hparams), seed, checkpoint_dir, max_batches, time.time()),
            )
            trial_id = int(cursor.lastrowid)
            log_path = self.trial_dir(experiment_id, trial_id) / "output.log"
            db.execute("UPDATE trials SET log_path = ? WHERE id = ?", (str(log_path), trial_id))
        return trial_id

    def set_launcher(self, experiment_id: int, pid: int) -> None:
        """Records the process that runs the experiment now, which ``pause`` signals."""
        with self._write() as db:
            db.execute(
                "UPDATE experiments SET launcher_pid = ?, launcher_host = ? WHERE id = ?",
                (pid, socket.gethostname(), experiment_id),
            )

    def set_state(self, experiment_id: int, state: str) -> None:
        """Sets the state of an experiment and of its trials; a final state records the time."""
        ended = time.time() if state in (COMPLETED, ERROR, PAUSED) else None
        with self._write() as db:
            db.execute("UPDATE experiments SET state = ?, ended_at = ? WHERE id = ?", (state, ended, experiment_id))
            db.execute(
                "UPDATE trials SET state = ?, ended_at = ? WHERE experiment_id = ?", (state, ended, experiment_id)
            )

    def set_progress(self, trial_id: int, batches_trained: int, max_batches: int) -> None:
        """Records where a trial (re)starts and how many batches it trains in all."""
        with self._write() as db:
            db.execute(
                "UPDATE trials SET batches_trained = ?, max_batches = ? WHERE id = ?",
                (batches_trained, max_batches, trial_id),
            )

    def record_metrics(self, trial_id: int, kind: str, batches: int, metrics: dict[str, Any]) -> None:
        """Records a workload's training metrics (``kind="training"``) or a validation's."""
        with self._write() as db:
            db.execute(
                "INSERT INTO metrics (trial_id, kind, batches, metrics, recorded_at) VALUES (?, ?, ?, ?, ?)",
                (trial_id, kind, batches, json.dumps(metrics), time.time()),
            )
            db.execute("UPDATE trials SET batches_trained = MAX(batches_trained, ?) WHERE id = ?", (batches, trial_id))

    def record_checkpoint(
        self, trial_id: int, uuid: str, batches: int, path: str, size_bytes: int, metadata: dict[str, Any]
    ) -> None:
        """Records a sealed checkpoint."""
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO checkpoints (uuid, trial_id, batches, path, size_bytes, metadata, state,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, 'COMPLETED', ?)",
                (uuid, trial_id, batches, path, size_bytes, json.dumps(metadata), time.time()),
            )

    def mark_checkpoints_deleted(self, uuids: list[str]) -> None:
        """Records that retention deleted these checkpoints' files."""
        with self._write() as db:
            db.executemany("UPDATE checkpoints SET state = 'DELETED' WHERE uuid = ?", [(uuid,) for uuid in uuids])

    # Reading.

    def experiments(self) -> list[dict[str, Any]]:
        """Every experiment, oldest first, with its trials' progress."""
        rows = self._connection.execute(
            "SELECT e.*, COALESCE(SUM(t.batches_trained), 0) AS batches_trained, MAX(t.max_batches) AS max_batches,"
            " COUNT(t.id) AS num_trials FROM experiments e LEFT JOIN trials t ON t.experiment_id = e.id"
            " GROUP BY e.id ORDER BY e.id"
        ).fetchall()
        return [self._experiment_view(row) for row in rows]

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        """One experiment, with its config and its trials.

        Raises:
            UnknownIdError: there is no experiment ``experiment_id``.
        """
        row = self._connection.execute("SELECT * FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
        if row is None:
            raise UnknownIdError(f"There is no experiment {experiment_id} in the store {self.path}.")
        view = self._experiment_view(row)
        view["config"] = json.loads(row["config"])
        view["trials"] = self.trials(experiment_id)
        return view

    def trials(self, experiment_id: int) -> list[dict[str, Any]]:
        rows = self._connection.execute("SELECT * FROM trials WHERE experiment_id = ? ORDER BY id", (experiment_id,))
        return [self._trial_view(row) for row in rows.fetchall()]

    def trial(self, trial_id: int) -> dict[str, Any]:
        """One trial.

        Raises:
            UnknownIdError: there is no trial ``trial_id``.
        """
        row = self._connection.execute("SELECT * FROM trials WHERE id = ?", (trial_id,)).fetchone()
        if row is None:
            raise UnknownIdError(f"There is no trial {trial_id} in the store {self.path}.")
        return self._trial_view(row)

    def metrics(self, trial_id: int, kind: str) -> list[dict[str, Any]]:
        """A trial's training or validation metrics, in the order of the batches."""
        rows = self._connection.execute(
            "SELECT batches, metrics FROM metrics WHERE trial_id = ? AND kind = ? ORDER BY batches, rowid",
            (trial_id, kind),
        )
        return [{"batches": row["batches"], "metrics": json.loads(row["metrics"])} for row in rows.fetchall()]

    def checkpoints(self, experiment_id: int, include_deleted: bool = False) -> list[dict[str, Any]]:
        """An experiment's checkpoints, oldest first: only those still on disk unless asked."""
        rows = self._connection.execute(
            "SELECT c.* FROM checkpoints c JOIN trials t ON c.trial_id = t.id WHERE t.experiment_id = ?"
            + ("" if include_deleted else " AND c.state = 'COMPLETED'")
            + " ORDER BY c.batches, c.created_at",
            (experiment_id,),
        )
        checkpoints = []
        for row in rows.fetchall():
            metadata = json.loads(row["metadata"])
            checkpoints.append(
                {
                    "uuid": row["uuid"],
                    "trial_id": row["trial_id"],
                    "batches": row["batches"],
                    "state": row["state"],
                    "validation_metrics": metadata.get("validation_metrics"),
                    "size_bytes": row["size_bytes"],
                    "path": row["path"],
                }
            )
        return checkpoints

    def _experiment_view(self, row: sqlite3.Row) -> dict[str, Any]:
        view = {
            key: row[key]
            for key in ("id", "name", "state", "context_dir", "entrypoint", "slots", "hosts", "created_at", "ended_at")
            + ("launcher_pid", "launcher_host")
        }
        view["test"] = bool(row["test_mode"])
        view["command"] = None if row["command"] is None else json.loads(row["command"])
        if view["state"] == ACTIVE and not _launcher_alive(row["launcher_pid"], row["launcher_host"]):
            view["state"] = INTERRUPTED
        record = dict(row)
        for key in ("batches_trained", "max_batches", "num_trials"):
            if key in record:
                view[key] = record[key]
        return view

    @staticmethod
    def _trial_view(row: sqlite3.Row) -> dict[str, Any]:
        view = dict(row)
        view["hparams"] = json.loads(view["hparams"])
        view["tensorboard_dir"] = str(Path(view["log_path"]).parent / "tensorboard")
        return view


def _enable_wal(connection: sqlite3.Connection, deadline: float) -> None:
    """Puts the database in WAL mode, waiting for other writers as long as ``deadline`` allows.

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


def _launcher_alive(pid: Optional[int], host: Optional[str]) -> bool:
    """Whether the launcher still runs; assumed so when it runs on another machine."""
    if pid is None or host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
