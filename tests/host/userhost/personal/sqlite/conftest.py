"""Fixtures of the store's rule tests: a real SQLite file of the current schema with its space recorded, and a
connection to it in autocommit mode, with no writer process and no event loop: each test calls the rule
functions of `host/userhost/personal/sqlite/` on it directly."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from wuu.host.userhost.personal.sqlite import history, sessions
from wuu.host.userhost.personal.sqlite.database import connect
from wuu.host.userhost.personal.sqlite.schema import migrate


@dataclass
class Ticks:
    """A clock that advances 1 ms per reading from 2026-03-01T12:00:00Z."""

    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@dataclass
class Store:
    """An open store file: its connection, its main conversation and the test's clock."""

    connection: sqlite3.Connection
    main: str
    clock: Ticks

    def count(self, table: str) -> int:
        (found,) = self.connection.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(found)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    path = tmp_path / "personal.sqlite"
    connection = connect(path, history.prepare)
    migrate(connection)
    clock = Ticks()
    sessions.create_or_check_space(connection, path, "local", "personal", clock())
    try:
        yield Store(connection, sessions.main_session_id(connection), clock)
    finally:
        connection.close()
