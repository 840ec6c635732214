"""The legacy ledger's snapshot: the rows of its record tables, read through a frozen copy
(`wuu.host.userhost.storage.review_ledger.frozen`), and their `source_digest`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.generated.models import ReviewLedgerRowCounts

from ..storage.review_ledger.errors import ReviewLedgerError
from ..storage.review_ledger.frozen import freeze
from ..storage.review_ledger.layout import RECORDS, check_table, read_rows
from .digest import source_digest


@dataclass(frozen=True)
class Snapshot:
    """The frozen logical content of a legacy ledger: the rows of its record tables, in primary-key order,
    and their `source_digest`."""

    rows: Mapping[str, Sequence[tuple[Any, ...]]]
    digest: str

    @property
    def counts(self) -> ReviewLedgerRowCounts:
        """How many rows each record table holds."""
        return ReviewLedgerRowCounts.model_validate({name: len(rows) for name, rows in self.rows.items()})


def read_source(path: Path) -> Snapshot:
    """The snapshot of the legacy ledger at `path`. ReviewLedgerError when it cannot be read or breaks the
    legacy layout."""
    frozen = freeze(path)
    try:
        rows: dict[str, list[tuple[Any, ...]]] = {}
        for table in RECORDS:
            check_table(frozen, table)
            rows[table.name] = read_rows(frozen, table)
    except ReviewLedgerError as error:
        raise ReviewLedgerError(
            f"{path} does not follow the legacy review ledger's layout: {error}"
        ) from None
    except sqlite3.Error as error:
        raise ReviewLedgerError(f"{path} cannot be read: {error}") from None
    finally:
        frozen.close()
    return Snapshot(rows, source_digest(rows))
