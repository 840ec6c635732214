"""The one error of the review ledgers: reading them, and migrating one into the other."""

from __future__ import annotations


class ReviewLedgerError(Exception):
    """A review ledger cannot be read or migrated as it is, or the command was given wrong flags; nothing was
    written. The message says what is wrong, naming the flag, the file or what the operator must reconcile."""
