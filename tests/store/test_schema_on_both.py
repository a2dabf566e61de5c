"""One schema on both databases: the SQLite migration chain and the PostgreSQL tables give the same store."""

import sqlalchemy

from det_estimator.store import ExperimentStore, StoreLocation
from det_estimator.store._tables import METADATA


def _shape(url: sqlalchemy.URL) -> dict[str, object]:
    """Every table of the database, with its columns (name, nullable), primary key and indexes, as reflected."""
    engine = sqlalchemy.create_engine(url)
    try:
        inspector = sqlalchemy.inspect(engine)
        shape: dict[str, object] = {}
        for table in sorted(inspector.get_table_names()):
            key = sorted(inspector.get_pk_constraint(table)["constrained_columns"])
            # SQLite reports an INTEGER PRIMARY KEY as nullable, though it never holds NULL.
            columns = [
                (column["name"], bool(column["nullable"]) and column["name"] not in key)
                for column in inspector.get_columns(table)
            ]
            shape[table] = {
                "columns": sorted(columns),
                "primary key": key,
                "indexes": sorted(
                    (index["name"], tuple(index["column_names"])) for index in inspector.get_indexes(table)
                ),
                "foreign keys": sorted(
                    (tuple(key["constrained_columns"]), key["referred_table"], tuple(key["referred_columns"]))
                    for key in inspector.get_foreign_keys(table)
                ),
            }
        return shape
    finally:
        engine.dispose()


def test_the_sqlite_chain_and_the_postgresql_tables_give_the_same_tables_and_columns(tmp_path, postgres_url):
    sqlite = StoreLocation(path=tmp_path / "store.sqlite")
    postgresql = StoreLocation(url=postgres_url)
    ExperimentStore(sqlite).close()
    ExperimentStore(postgresql).close()

    on_sqlite, on_postgresql = _shape(sqlite.sqlalchemy_url()), _shape(postgresql.sqlalchemy_url())

    assert on_sqlite == on_postgresql
    assert set(on_sqlite) == set(METADATA.tables)


def test_timestamps_are_eight_byte_floats_and_counts_sixty_four_bit_integers_on_postgresql(postgres_url):
    location = StoreLocation(url=postgres_url)
    ExperimentStore(location).close()
    engine = sqlalchemy.create_engine(location.sqlalchemy_url())
    try:
        inspector = sqlalchemy.inspect(engine)
        types = {
            (table, column["name"]): type(column["type"])
            for table in inspector.get_table_names()
            for column in inspector.get_columns(table)
        }
    finally:
        engine.dispose()

    # PostgreSQL's REAL is four bytes: a timestamp would lose its seconds.
    assert types[("experiments", "created_at")] is sqlalchemy.dialects.postgresql.DOUBLE_PRECISION
    assert types[("metrics", "recorded_at")] is sqlalchemy.dialects.postgresql.DOUBLE_PRECISION
    for big in [("checkpoints", "size_bytes"), ("experiments", "launcher_pid"), ("experiments", "launcher_started")]:
        assert types[big] is sqlalchemy.BIGINT, big
    for table in ["experiments", "trials", "metrics", "trial_runs", "jobs", "trial_restarts", "log_chunks"]:
        assert types[(table, "id")] is sqlalchemy.BIGINT, table
