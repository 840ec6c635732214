"""The migration of a user space's legacy Personal review ledger (`personal-review.sqlite`) into the selected
review-ledger provider (spec/schema/receipts/review_migration.schema.json, spec/data/legacy_review_ledger.json,
spec/data/review_ledger_sqlite.json). The ledgers' files as stored, and the presence lock the migration holds
like a host, are the user host's storage (`wuu.host.userhost.storage`): this package builds on them, and no
module of the user host imports it.

- `snapshot`: the legacy snapshot; `digest`: `source_digest`; `importer`: the import into the bundled provider;
- `selection`: the provider a composition profile selects; `migration`: inspect and apply;
- `cli`: `wuu state migrate-personal-review`.
"""

from .migration import migrate
from .selection import Selection, select

__all__ = ["Selection", "migrate", "select"]
