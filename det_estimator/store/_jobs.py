"""Jobs in the store: scripts run on N slots outside any experiment (``det-estimator job run``).

A job is what the reference system calls a generic task: batch inference, say. It has
no trials, metrics or checkpoints of its own; the store keeps its config, its command,
how many processes ran it, its state, how it ended and where its output log is.
"""

import json
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from sqlalchemy.engine import RowMapping

from det_estimator.store._database import Database, StoreLocation, Transaction, retried
from det_estimator.store._errors import UnknownIdError
from det_estimator.store._launchers import (
    Launched,
    LauncherHeartbeat,
    launcher_columns,
    launcher_silence,
    state_as_seen,
)
from det_estimator.store._records import State

BATCH_INFERENCE = "BATCH_INFERENCE"


@dataclass(frozen=True)
class JobRecord:
    """One job.

    Attributes:
        kind: what the job does (``BATCH_INFERENCE``).
        config: the job's config as given (``data``, ``resources``, the entrypoint).
        command: the command run on every slot, as words.
        log_path: the file that keeps everything its processes printed.
        exit_status: how its processes exited, once they did.
        error: the first traceback of its output when it failed (``message``, ``traceback``).
        launcher_pid, launcher_host: the process that runs it.
    """

    id: int
    name: str
    kind: str
    state: State
    config: dict[str, Any]
    context_dir: str
    command: list[str]
    slots: int
    log_path: str
    created_at: float
    ended_at: Optional[float]
    exit_status: Optional[int]
    error: Optional[dict[str, Any]]
    launcher_pid: Optional[int] = None
    launcher_host: Optional[str] = None


class _Store(Protocol):
    """What :class:`JobTable`'s methods use of the ``ExperimentStore`` they are methods of."""

    _database: Database
    _clock: str
    _heartbeat: LauncherHeartbeat
    location: StoreLocation

    @property
    def files_dir(self) -> Path: ...

    def _write(self) -> AbstractContextManager[Transaction]: ...


class JobTable:
    """The store's methods for jobs; a base of ``ExperimentStore``, which provides what :class:`_Store` lists."""

    @retried
    def create_job(
        self: _Store,
        name: str,
        config: dict[str, Any],
        context_dir: str,
        command: list[str],
        slots: int,
        kind: str = BATCH_INFERENCE,
    ) -> int:
        """Records a new ACTIVE job run by this process, which refreshes its heartbeat until it ends; returns its id.

        Its output log goes to ``<store files>/jobs/<id>/output.log``.
        """
        with self._write() as db:
            pid, host, started = launcher_columns()
            job_id = db.insert(
                "INSERT INTO jobs (name, kind, state, config, context_dir, command, slots, log_path, created_at,"
                " launcher_pid, launcher_host, launcher_started, launcher_seen_at) VALUES (:name, :kind, :state,"
                f" :config, :context_dir, :command, :slots, '', :created_at, :pid, :host, :started, {self._clock})"
                " RETURNING id",
                {
                    "name": name,
                    "kind": kind,
                    "state": State.ACTIVE.value,
                    "config": json.dumps(config),
                    "context_dir": context_dir,
                    "command": json.dumps(list(command)),
                    "slots": slots,
                    "created_at": time.time(),
                    "pid": pid,
                    "host": host,
                    "started": started,
                },
            )
            log_path = self.files_dir / "jobs" / str(job_id) / "output.log"
            db.execute("UPDATE jobs SET log_path = :log_path WHERE id = :id", {"log_path": str(log_path), "id": job_id})
        self._heartbeat.add(Launched("jobs", job_id))
        return job_id

    @retried
    def end_job(
        self: _Store,
        job_id: int,
        state: State,
        exit_status: Optional[int] = None,
        error: Optional[dict[str, Any]] = None,
    ) -> None:
        """Records how a job ended."""
        self._heartbeat.discard(Launched("jobs", job_id))
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET state = :state, ended_at = :ended, exit_status = :exit_status, error = :error"
                " WHERE id = :id",
                {
                    "state": State(state).value,
                    "ended": time.time(),
                    "exit_status": exit_status,
                    "error": None if error is None else json.dumps(error),
                    "id": job_id,
                },
            )

    def jobs(self: _Store) -> list[JobRecord]:
        """Every job, oldest first."""
        rows = self._database.read(f"{_jobs_read(self._database)} ORDER BY j.id")
        return [_job_record(row) for row in rows]

    def job(self: _Store, job_id: int) -> JobRecord:
        """One job.

        Raises:
            UnknownIdError: there is no job ``job_id``.
        """
        row = self._database.read_one(f"{_jobs_read(self._database)} WHERE j.id = :id", {"id": job_id})
        if row is None:
            raise UnknownIdError(f"There is no job {job_id} in the store {self.location}.")
        return _job_record(row)


def _jobs_read(database: Database) -> str:
    """The query of jobs with their launcher's silence, from which their state as seen is read."""
    return f"SELECT j.*, {launcher_silence(database.is_sqlite, 'j')} FROM jobs j"


def _job_record(row: RowMapping) -> JobRecord:
    return JobRecord(
        id=row["id"],
        name=row["name"],
        kind=row["kind"],
        state=state_as_seen(
            State(row["state"]),
            row["launcher_pid"],
            row["launcher_host"],
            row["launcher_started"],
            row["launcher_silence"],
        ),
        config=json.loads(row["config"]),
        context_dir=row["context_dir"],
        command=json.loads(row["command"]),
        slots=row["slots"],
        log_path=row["log_path"],
        created_at=row["created_at"],
        ended_at=row["ended_at"],
        exit_status=row["exit_status"],
        error=None if row["error"] is None else json.loads(row["error"]),
        launcher_pid=row["launcher_pid"],
        launcher_host=row["launcher_host"],
    )
