"""The store's tests run on both of its databases: an SQLite file and a PostgreSQL database."""

import contextlib
from collections.abc import Iterator
from typing import Any, Optional

import pytest
import sqlalchemy

from det_estimator.store import ExperimentStore, StoreLocation


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path) -> StoreLocation:
    """Where a new store goes: an SQLite file that does not exist yet, or an empty PostgreSQL database."""
    if request.param == "sqlite":
        return StoreLocation(path=tmp_path / "store.sqlite")
    return StoreLocation(url=request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(store_location) -> Iterator[ExperimentStore]:
    """A new store, on each database in turn."""
    with ExperimentStore(store_location) as store:
        yield store


@pytest.fixture
def sqlite_store(tmp_path) -> Iterator[ExperimentStore]:
    """A new store in an SQLite file, for what only SQLite has (its journal mode, its page limit)."""
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        yield store


class Beside:
    """A connection of its own to a store's database, beside the store's: as another program would reach it."""

    def __init__(self, connection: sqlalchemy.Connection) -> None:
        self._connection = connection

    def rows(self, statement: str, parameters: Optional[dict[str, Any]] = None) -> list[tuple]:
        return [tuple(row) for row in self._connection.execute(sqlalchemy.text(statement), parameters or {})]

    def execute(self, statement: str, parameters: Optional[dict[str, Any]] = None) -> None:
        self._connection.execute(sqlalchemy.text(statement), parameters or {})


@contextlib.contextmanager
def _beside(store: ExperimentStore) -> Iterator[Beside]:
    engine = sqlalchemy.create_engine(store.location.sqlalchemy_url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            yield Beside(connection)
    finally:
        engine.dispose()


@pytest.fixture
def beside():
    """``beside(store)``: a :class:`Beside` connection to the store's database, each statement committed as it runs."""
    return _beside
