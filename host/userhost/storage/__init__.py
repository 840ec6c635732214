"""The user host's storage under its home, shared by the host, its composition modules and the maintenance
commands (the token commands, the review-ledger migration):

- `layout`: `StorageLayout`, where a user space's data of one product domain lives;
- `presence`: the lock that a running host or a maintenance command holds alone, and the host's record next to
  it;
- `review_ledger`: the review ledgers' files as stored, and the Personal composition's startup check on them.

The private modes of its directories and files are `wuu.host.userhost.private`.
"""

from .layout import StorageLayout
from .presence import PresenceHeld, PresenceLock

__all__ = ["PresenceHeld", "PresenceLock", "StorageLayout"]
