"""The migration of a user space's legacy Personal review ledger (`personal-review.sqlite`) into the selected
review-ledger provider (spec/schema/receipts/review_migration.schema.json, spec/data/legacy_review_ledger.json,
spec/data/review_ledger_sqlite.json), and the presence lock of user hosts that it relies on.

- `layout`: both files' tables, from the spec's data; `snapshot`: frozen copies, the legacy snapshot;
  `digest`: `source_digest`; `provider`: the bundled provider `wuu.review-ledger.sqlite`;
- `selection`: the provider a composition profile selects; `migration`: inspect and apply;
- `presence`: the lock that a running host or the migration holds alone, and the host's record next to it;
- `startup`: the Personal composition's startup check;
- `cli`: `wuu state migrate-personal-review`.
"""

from .errors import ReviewLedgerError
from .migration import migrate
from .presence import PresenceHeld, PresenceLock
from .selection import Selection, select
from .startup import require_migrated

__all__ = [
    "PresenceHeld",
    "PresenceLock",
    "ReviewLedgerError",
    "Selection",
    "migrate",
    "require_migrated",
    "select",
]
