"""`source_digest`: the SHA-256 of a snapshot's canonical dump (spec/schema/receipts/review_migration.schema.json).

Each row is one line: the JSON array of its table's name and its values in layout order, with no whitespace,
strings escaped as RFC 8785 does (Python's `json` with `ensure_ascii=False` escapes exactly `"`, `\\` and the
control characters, with the same short forms and lowercase hexadecimal), in UTF-8, then a line feed. Tables
come in layout order and rows in primary-key order, so the digest depends only on the logical content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..storage.review_ledger.layout import RECORDS


def canonical_line(table: str, row: Sequence[Any]) -> bytes:
    """One row's line of the canonical dump."""
    return json.dumps([table, *row], ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def source_digest(rows: Mapping[str, Sequence[Sequence[Any]]]) -> str:
    """The lowercase hexadecimal digest of the record tables' rows (by table name, in primary-key order)."""
    digest = hashlib.sha256()
    for table in RECORDS:
        for row in rows[table.name]:
            digest.update(canonical_line(table.name, row))
    return digest.hexdigest()
