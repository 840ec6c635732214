"""The review ledgers of a user space's Personal state folder as stored: the legacy Personal review ledger
(`personal-review.sqlite`, spec/data/legacy_review_ledger.json) and the bundled review-ledger provider
(spec/data/review_ledger_sqlite.json). The migration from one to the other is `wuu.host.userhost.review`.

- `layout`: both files' tables, from the spec's data; `frozen`: frozen copies of a file that is only read;
- `provider`: what the bundled provider `wuu.review-ledger.sqlite` holds for a source path;
- `startup`: the Personal composition's startup check, `require_migrated`;
- `errors`: `ReviewLedgerError`.
"""

from .errors import ReviewLedgerError
from .startup import require_migrated

__all__ = ["ReviewLedgerError", "require_migrated"]
