"""Inspect and apply the migration of a user space's legacy review ledger into the selected provider
(spec/schema/receipts/review_migration.schema.json).

Both hold the space's presence lock for their whole run, so no host starts or runs meanwhile (nor another
migration), and both read the source and the destination through frozen copies. Inspection writes nothing.
Apply imports only the snapshot whose digest the operator read from an inspection, into an empty destination,
with the marker in the same transaction; a matching committed marker makes it `already-migrated` without
writing anything.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from wuu.generated.models import (
    ReviewLedgerMarkerStatus,
    ReviewLedgerMigrationMode,
    ReviewLedgerMigrationResult,
    ReviewLedgerMigrationStatus,
)

from ..storage.presence import PresenceHeld, PresenceLock
from ..storage.review_ledger.errors import ReviewLedgerError
from ..storage.review_ledger.layout import LEGACY_FILE, PROVIDER_FILE
from ..storage.review_ledger.provider import read_destination
from .importer import import_snapshot
from .selection import Selection
from .snapshot import Snapshot, read_source

RECONCILE = (
    "this requires operator reconciliation (nothing was written, and the command never overwrites records)"
)


def migrate(
    selection: Selection, expected_source_digest: str | None = None, now: datetime | None = None
) -> ReviewLedgerMigrationResult:
    """Inspect the space's legacy ledger, or apply it when `expected_source_digest` is given.

    ReviewLedgerError when there is no legacy ledger, the user does not own it, a host runs, the digest
    does not match, the source changed after its migration, or the destination is populated or incompatible.
    """
    state = selection.state
    source = state / LEGACY_FILE
    if not source.is_file():
        raise ReviewLedgerError(f"there is no legacy review ledger at {source}: nothing to migrate")
    _require_owner(state, source)
    try:
        presence = PresenceLock.acquire(state)
    except PresenceHeld as held:
        raise ReviewLedgerError(
            f"user space {selection.user_space_id!r} is in use: {held}; stop every Personal host of the "
            "space (and let any other migration end), then run the command again"
        ) from None
    with presence:
        source_path = os.path.realpath(source)
        snapshot = read_source(source)
        destination = state / PROVIDER_FILE
        found = read_destination(destination, source_path)
        if found.marker is not None:
            if found.marker.source_digest != snapshot.digest:
                raise ReviewLedgerError(
                    f"the legacy review ledger {source} changed after it was migrated (the marker in "
                    f"{destination} has digest {found.marker.source_digest}, the source now {snapshot.digest}): "
                    + RECONCILE
                )
            _check_expected(expected_source_digest, snapshot)
            status = ReviewLedgerMigrationStatus.ALREADY_MIGRATED
        elif found.populated is not None:
            raise ReviewLedgerError(
                f"{destination} is a populated or incompatible destination ({found.populated}): " + RECONCILE
            )
        elif expected_source_digest is None:
            status = ReviewLedgerMigrationStatus.MIGRATION_REQUIRED
        else:
            _check_expected(expected_source_digest, snapshot)
            try:
                import_snapshot(destination, source_path, snapshot, now or datetime.now(UTC))
            except (sqlite3.Error, OSError) as error:
                raise ReviewLedgerError(
                    f"{destination} cannot be written: {error} (the source is untouched: inspect again before "
                    "retrying)"
                ) from None
            status = ReviewLedgerMigrationStatus.MIGRATED
    migrated = status is not ReviewLedgerMigrationStatus.MIGRATION_REQUIRED
    return ReviewLedgerMigrationResult(
        status=status,
        mode=ReviewLedgerMigrationMode.INSPECT
        if expected_source_digest is None
        else ReviewLedgerMigrationMode.APPLY,
        user_space_id=selection.user_space_id,
        composition_profile=selection.composition_profile,
        selected_provider=selection.provider,
        source_path=source_path,
        source_digest=snapshot.digest,
        expected_source_digest=expected_source_digest,
        row_counts=snapshot.counts,
        marker_status=ReviewLedgerMarkerStatus.COMMITTED if migrated else ReviewLedgerMarkerStatus.ABSENT,
    )


def _check_expected(expected: str | None, snapshot: Snapshot) -> None:
    if expected is not None and expected != snapshot.digest:
        raise ReviewLedgerError(
            f"--expect-source-digest {expected} is not the source's digest {snapshot.digest}: the source is not "
            "the one that was inspected; inspect it again and check what changed (nothing was written)"
        )


def _require_owner(*paths: Path) -> None:
    """ReviewLedgerError unless the user running the command owns every one of `paths` (the local owner)."""
    me = os.geteuid()
    for path in paths:
        owner = path.stat().st_uid
        if owner != me:
            raise ReviewLedgerError(
                f"{path} belongs to uid {owner}, not to this user (uid {me}): run the command as the user "
                "space's local owner"
            )
