"""The bundled review-ledger provider, `wuu.review-ledger.sqlite`: one SQLite file in the Personal state
folder (spec/data/review_ledger_sqlite.json), in WAL mode with `synchronous=FULL`.

`examine` says what a connection to the file holds for a migration (the marker of a source path, or why it
does not accept an import); `read_destination` does so through a frozen copy, so that it writes nothing. The
migration's import into the file is `wuu.host.userhost.review.importer`.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.models import ReviewLedgerRowCounts

from .errors import ReviewLedgerError
from .frozen import freeze
from .layout import PROVIDER, check_table


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
