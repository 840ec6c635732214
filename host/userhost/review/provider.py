"""The bundled review-ledger provider, `wuu.review-ledger.sqlite`: one SQLite file in the Personal state
folder (spec/data/review_ledger_sqlite.json), in WAL mode with `synchronous=FULL`.

`read_destination` says what the file holds for a migration (the marker of a source path, or why it does not
accept an import), reading it through a frozen copy so that it writes nothing. `import_snapshot` is the one
transaction that creates the tables when the file has none, copies a snapshot's rows and commits the
path-bound marker: a kill at any moment leaves either all of it or none of it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from wuu.generated.models import ReviewLedgerRowCounts

from ..private import ensure_file
from .errors import ReviewLedgerError
from .layout import MARKERS, PROVIDER, RECORDS, check_table, create_table, insert_row
from .snapshot import Snapshot, freeze


@dataclass(frozen=True)
class Marker:
    """A committed migration marker: the digest of the snapshot it imported, and its row counts."""

    source_digest: str
    counts: ReviewLedgerRowCounts


@dataclass(frozen=True)
class Destination:
    """What the provider's file holds for one source path."""

    marker: Marker | None
    """The committed marker for the source path, if any."""
    populated: str | None
    """Why the file does not accept an import (what it holds), or None when it is empty."""


EMPTY = Destination(None, None)


def examine(connection: sqlite3.Connection, source_path: str) -> Destination:
    """What the connection's database holds for `source_path`."""
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    tables = connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchall()
    if version == 0 and not tables:
        return EMPTY
    if version != PROVIDER.user_version:
        return Destination(None, f"it has schema version {version}, not {PROVIDER.user_version}")
    try:
        for table in PROVIDER.tables:
            check_table(connection, table)
    except ReviewLedgerError as error:
        return Destination(None, str(error))
    found = connection.execute(
        "SELECT source_digest, settings, actions, audit FROM migration_markers WHERE source_path = ?",
        (source_path,),
    ).fetchone()
    if found is not None:
        digest, settings, actions, audit = found
        return Destination(
            Marker(digest, ReviewLedgerRowCounts(settings=settings, actions=actions, audit=audit)), None
        )
    held = []
    for table in PROVIDER.tables:
        (rows,) = connection.execute(f"SELECT count(*) FROM {table.name}").fetchone()
        if rows:
            held.append(f"{rows} {table.name} rows")
    return Destination(None, f"it holds {', '.join(held)}") if held else EMPTY


def read_destination(path: Path, source_path: str) -> Destination:
    """What the provider's file at `path` holds for `source_path`, read through a frozen copy (a file that
    does not exist is empty). ReviewLedgerError when it is no SQLite database."""
    if not path.exists():
        return EMPTY
    frozen = freeze(path)
    try:
        return examine(frozen, source_path)
    finally:
        frozen.close()


def import_snapshot(path: Path, source_path: str, snapshot: Snapshot, now: datetime) -> None:
    """Copy the snapshot's rows into the provider's file at `path` (created when missing) and commit the
    marker for `source_path`, all in one transaction. ReviewLedgerError, with nothing written, when the file
    is no longer empty once the transaction holds it."""
    ensure_file(path)  # 0600 whatever the umask; its -wal and -shm take the same mode
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        (mode,) = connection.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal":
            raise ReviewLedgerError(f"{path} cannot be switched to WAL mode (it is in {mode} mode)")
        connection.execute("PRAGMA synchronous = FULL")
        connection.execute("BEGIN IMMEDIATE")
        try:
            found = examine(connection, source_path)
            if found.marker is not None or found.populated is not None:
                raise ReviewLedgerError(f"{path} was written by someone else during the migration")
            (version,) = connection.execute("PRAGMA user_version").fetchone()
            if version == 0:
                for table in PROVIDER.tables:
                    connection.execute(create_table(table))
                connection.execute(f"PRAGMA user_version = {PROVIDER.user_version}")
            for table in RECORDS:
                connection.executemany(insert_row(table), snapshot.rows[table.name])
            marker = {
                "source_path": source_path,
                "source_digest": snapshot.digest,
                **snapshot.counts.to_wire(),
                "migrated_at": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
            connection.execute(insert_row(MARKERS), tuple(marker[column.name] for column in MARKERS.columns))
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
    finally:
        connection.close()
