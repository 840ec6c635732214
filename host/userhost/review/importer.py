"""The migration's one write into the bundled review-ledger provider (spec/data/review_ledger_sqlite.json):
`import_snapshot` is the one transaction that creates the tables when the file has none, copies a snapshot's
rows and commits the path-bound marker: a kill at any moment leaves either all of it or none of it.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from ..private import ensure_file
from ..storage.review_ledger.errors import ReviewLedgerError
from ..storage.review_ledger.layout import MARKERS, PROVIDER, RECORDS, create_table, insert_row
from ..storage.review_ledger.provider import examine
from .snapshot import Snapshot


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
