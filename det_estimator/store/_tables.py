"""The store's tables at the current schema version, as SQLAlchemy ``Table`` objects.

A PostgreSQL store is made from these (``_schema.create_postgresql_store``); an SQLite
store from its migration chain (``_schema.MIGRATIONS``), which a test checks gives the
same tables and columns. The types are those right on PostgreSQL: SQLite's ``REAL`` is
an 8-byte float there only as ``Double`` (PostgreSQL's ``REAL`` is 4 bytes, which would
round a timestamp to minutes), and sizes, pids, process start ticks, batch counts and
seeds are ``BigInteger``. Every table keyed by an ``id`` numbers it itself.

A new column or table is added in both places: a step of the SQLite chain, and here
(see ``_schema`` for how a step reaches an existing PostgreSQL store).
"""

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)

METADATA = MetaData()


def _id() -> Column:
    return Column("id", BigInteger, primary_key=True, autoincrement=True)


def _timestamp(name: str, nullable: bool = False) -> Column:
    return Column(name, Double, nullable=nullable)


EXPERIMENTS = Table(
    "experiments",
    METADATA,
    _id(),
    Column("name", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("config", Text, nullable=False),
    Column("context_dir", Text, nullable=False),
    Column("entrypoint", Text, nullable=False),
    Column("command", Text),
    Column("slots", Integer, nullable=False),
    Column("hosts", Text),
    Column("test_mode", Integer, nullable=False),
    _timestamp("created_at"),
    _timestamp("ended_at", nullable=True),
    Column("launcher_pid", BigInteger),
    Column("launcher_host", Text),
    Column("run_key", Text),
    _timestamp("pause_requested_at", nullable=True),
    Column("storage_tag", Text, nullable=False, server_default=text("''")),
    Column("trial_class", Text),
    Column("searcher_state", Text),
    Column("launcher_started", BigInteger),
    _timestamp("launcher_seen_at", nullable=True),
    Index("experiments_by_run_key", "run_key"),
)

TRIALS = Table(
    "trials",
    METADATA,
    _id(),
    Column("experiment_id", BigInteger, ForeignKey("experiments.id"), nullable=False),
    Column("state", Text, nullable=False),
    Column("hparams", Text, nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("checkpoint_dir", Text, nullable=False),
    Column("log_path", Text, nullable=False),
    Column("batches_trained", BigInteger, nullable=False, server_default=text("0")),
    Column("max_batches", BigInteger),
    _timestamp("created_at"),
    _timestamp("ended_at", nullable=True),
    Column("request_id", BigInteger),
    Column("search_state", Text),
    Column("target_length", BigInteger),
    Column("reported_length", BigInteger),
    Column("reported_metric", Text),
    Column("answered_length", BigInteger),
    Column("restarts", Integer, nullable=False, server_default=text("0")),
)

TRIAL_RUNS = Table(
    "trial_runs",
    METADATA,
    _id(),
    Column("trial_id", BigInteger, ForeignKey("trials.id"), nullable=False),
    _timestamp("started_at"),
    _timestamp("ended_at", nullable=True),
    Column("state", Text, nullable=False),
    Column("preempted", Integer, nullable=False, server_default=text("0")),
    Column("exit_status", Integer),
    Column("error", Text),
    Column("start_batches", BigInteger, nullable=False, server_default=text("0")),
    Index("trial_runs_by_trial", "trial_id"),
)

METRICS = Table(
    "metrics",
    METADATA,
    _id(),
    Column("trial_id", BigInteger, ForeignKey("trials.id"), nullable=False),
    Column("kind", Text, CheckConstraint("kind IN ('training', 'validation')"), nullable=False),
    Column("batches", BigInteger, nullable=False),
    Column("metrics", Text, nullable=False),
    _timestamp("recorded_at"),
    Column("run_id", BigInteger),
    Index("metrics_by_trial", "trial_id", "kind", "batches"),
)

CHECKPOINTS = Table(
    "checkpoints",
    METADATA,
    Column("uuid", Text, primary_key=True),
    Column("trial_id", BigInteger, ForeignKey("trials.id"), nullable=False),
    Column("batches", BigInteger, nullable=False),
    Column("path", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("state", Text, CheckConstraint("state IN ('COMPLETED', 'DELETED')"), nullable=False),
    _timestamp("created_at"),
    Column("run_id", BigInteger),
    Index("checkpoints_by_trial", "trial_id", "batches"),
)

JOBS = Table(
    "jobs",
    METADATA,
    _id(),
    Column("name", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("config", Text, nullable=False),
    Column("context_dir", Text, nullable=False),
    Column("command", Text, nullable=False),
    Column("slots", Integer, nullable=False),
    Column("log_path", Text, nullable=False),
    _timestamp("created_at"),
    _timestamp("ended_at", nullable=True),
    Column("exit_status", Integer),
    Column("error", Text),
    Column("launcher_pid", BigInteger),
    Column("launcher_host", Text),
    Column("launcher_started", BigInteger),
    _timestamp("launcher_seen_at", nullable=True),
)

TRIAL_RESTARTS = Table(
    "trial_restarts",
    METADATA,
    _id(),
    Column("trial_id", BigInteger, ForeignKey("trials.id"), nullable=False),
    Column("failed_run_id", BigInteger, ForeignKey("trial_runs.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("cause", Text, nullable=False),
    _timestamp("restarted_at"),
    Index("trial_restarts_by_trial", "trial_id"),
)

LOG_CHUNKS = Table(
    "log_chunks",
    METADATA,
    _id(),
    Column("trial_id", BigInteger, ForeignKey("trials.id")),
    Column("job_id", BigInteger, ForeignKey("jobs.id")),
    _timestamp("written_at"),
    Column("text", Text, nullable=False),
    CheckConstraint("(trial_id IS NULL) <> (job_id IS NULL)", name="log_chunks_one_owner"),
    Index("log_chunks_by_trial", "trial_id", "id"),
    Index("log_chunks_by_job", "job_id", "id"),
)

STORE_INFO = Table(
    "store_info",
    METADATA,
    Column("id", Integer, CheckConstraint("id = 1"), primary_key=True, autoincrement=False),
    Column("application", Text, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("store_id", Text, nullable=False),
    Column("home", Text),
    _timestamp("created_at"),
    Column("files_dir", Text),
)
