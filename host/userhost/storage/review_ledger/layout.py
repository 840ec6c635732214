"""The review ledgers' files and tables, as the spec's data fixes them: the legacy Personal review ledger
(spec/data/legacy_review_ledger.json) and the bundled review-ledger provider (spec/data/review_ledger_sqlite.json),
both packaged with `wuu.generated`.

Statements are built from the layouts, so no table or column is written down twice: `create_table` gives a
table's `CREATE TABLE`, `insert_row` its `INSERT`, `read_rows` its rows in primary-key order, and
`check_table` and `read_rows` refuse a file whose table breaks its layout.
"""

from __future__ import annotations

import sqlite3
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from wuu.generated.models import SqliteColumnType, SqliteLayout, SqliteTable

from .errors import ReviewLedgerError


def _load(name: str) -> SqliteLayout:
    text = resources.files("wuu.generated").joinpath("schema", "data", name).read_text("utf-8")
    return SqliteLayout.model_validate_json(text, strict=True)


LEGACY = _load("legacy_review_ledger.json")
"""The legacy ledger: settings, actions and audit."""
PROVIDER = _load("review_ledger_sqlite.json")
"""The bundled provider: the legacy ledger's tables and the migration markers."""
PROVIDER_ID = "wuu.review-ledger.sqlite"
"""The bundled provider's ID (`selected_provider`)."""
LEGACY_FILE = PurePosixPath(LEGACY.file).name
PROVIDER_FILE = PurePosixPath(PROVIDER.file).name
MARKERS = next(table for table in PROVIDER.tables if table.name == "migration_markers")
"""The provider's path-bound migration markers."""
RECORDS = LEGACY.tables
"""The tables that a migration copies, in the order the digest and the import take them."""

_PYTHON_TYPES: dict[SqliteColumnType, type] = {SqliteColumnType.INTEGER: int, SqliteColumnType.TEXT: str}


def state_folder(home: Path, user_space_id: str) -> Path:
    """The Personal state folder of a user space, which holds both ledgers."""
    return Path(LEGACY.file.replace("<home>", str(home)).replace("<space>", user_space_id)).parent


def create_table(table: SqliteTable) -> str:
    """The table's `CREATE TABLE` statement."""
    columns = [
        f"{column.name} {column.type.value}{'' if column.nullable else ' NOT NULL'}"
        for column in table.columns
    ]
    return f"CREATE TABLE {table.name} ({', '.join(columns)}, PRIMARY KEY ({', '.join(table.primary_key)}))"


def select_rows(table: SqliteTable) -> str:
    """Every row of the table, its columns in layout order, in ascending primary-key order (TEXT bytewise)."""
    names = ", ".join(column.name for column in table.columns)
    order = ", ".join(f"{key} COLLATE BINARY" for key in table.primary_key)
    return f"SELECT {names} FROM {table.name} ORDER BY {order}"


def insert_row(table: SqliteTable) -> str:
    """An `INSERT` of one row, its values in layout order."""
    names = ", ".join(column.name for column in table.columns)
    return f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(table.columns))})"


def check_table(connection: sqlite3.Connection, table: SqliteTable) -> None:
    """ReviewLedgerError unless the connection's table has the layout's columns (names, declared types,
    NOT NULL, primary key)."""
    found = connection.execute(f"PRAGMA table_info({table.name})").fetchall()
    if not found:
        raise ReviewLedgerError(f"it has no table {table.name}")
    expected = [
        (column.name, column.type.value, not column.nullable, _key_position(table, column.name))
        for column in table.columns
    ]
    actual = [(name, str(kind).upper(), bool(not_null), key) for _, name, kind, not_null, _, key in found]
    if actual != expected:
        raise ReviewLedgerError(f"its table {table.name} does not have the layout's columns")


def read_rows(connection: sqlite3.Connection, table: SqliteTable) -> list[tuple[Any, ...]]:
    """The table's rows in primary-key order; ReviewLedgerError when a value breaks its column's type."""
    rows: list[tuple[Any, ...]] = connection.execute(select_rows(table)).fetchall()
    for row in rows:
        for column, value in zip(table.columns, row, strict=True):
            if column.nullable if value is None else type(value) is _PYTHON_TYPES[column.type]:
                continue
            kind = "NULL" if value is None else type(value).__name__
            raise ReviewLedgerError(
                f"its column {table.name}.{column.name} holds {kind}, not {column.type.value}"
            )
    return rows


def _key_position(table: SqliteTable, name: str) -> int:
    return table.primary_key.index(name) + 1 if name in table.primary_key else 0
