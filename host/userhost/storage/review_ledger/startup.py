"""The Personal composition's startup check: a host whose state folder holds a legacy review ledger starts
only once the selected provider holds a committed marker for that ledger's path. It never creates the
provider's file to find out: an existing ledger is never silently replaced by an empty one.
"""

from __future__ import annotations

import os
from pathlib import Path

from wuu.generated.models import UserHostErrorCode

from ...errors import UserHostStartError
from .errors import ReviewLedgerError
from .layout import LEGACY_FILE, PROVIDER_FILE, PROVIDER_ID
from .provider import read_destination


def require_migrated(state: Path, user_space_id: str) -> None:
    """UserHostStartError `personal_review_legacy_migration_required` when `state` holds a legacy review
    ledger that the bundled provider has no committed marker for. It only reads (through frozen copies)."""
    source = state / LEGACY_FILE
    if not source.exists():
        return
    destination = state / PROVIDER_FILE
    if not destination.exists():
        reason = f"{destination} does not exist"
    else:
        try:
            found = read_destination(destination, os.path.realpath(source))
        except ReviewLedgerError as error:
            reason = str(error)
        else:
            if found.marker is not None:
                return
            reason = f"{destination} holds no migration marker for it"
    raise UserHostStartError(
        UserHostErrorCode.PERSONAL_REVIEW_LEGACY_MIGRATION_REQUIRED,
        f"the legacy review ledger {source} has not been migrated into {PROVIDER_ID} ({reason}): stop every "
        f"Personal host of user space {user_space_id!r}, keep a backup of the ledger and run "
        f"`wuu state migrate-personal-review --user-space {user_space_id} --composition-profile personal`, "
        "then the same with `--apply --expect-source-digest DIGEST`",
    )
