"""The approval ledger interface: the durable cards, rules and review setting of one space (the bundled one:
`sqlite.approval_ledger.SqliteApprovalLedger`). Every call is one durable transition, checked against the stored
state in the same step; a refusal is one of the plain exceptions of `refusals.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from wuu.generated.models import ApprovalCard, ApprovalRule, ApprovalRuleMode, ApprovalStatus, ReviewSettings


@dataclass(frozen=True)
class NewCard:
    """A card to save, as the host built it from an agent's tool call."""

    session_id: str
    call_id: str
    """The agent's tool call: a retry of the same call finds the same card."""
    source: str
    task_id: str | None
    action: Mapping[str, Any]
    digest: str
    precondition: Mapping[str, Any] | None
    """What must still hold when the action starts besides the digest (a file's digest and size, None when it
    was missing; the identity of a command's executable)."""
    preview: Mapping[str, Any]
    summary: str
    request_text: str
    """The original authenticated user request the action answers (what automatic review is shown)."""
    expires_at: datetime | None


@dataclass(frozen=True)
class StoredCard:
    """A card with what the host needs besides its wire form."""

    card: ApprovalCard
    precondition: Mapping[str, Any] | None
    request_text: str


class ApprovalLedger(Protocol):
    """The approval cards, rules and automatic-review setting of one space."""

    async def create(self, card_id: str, new: NewCard, now: datetime) -> tuple[StoredCard, bool]:
        """Save a waiting card and its history anchor, or find the card the same tool call already made:
        (the card, whether it existed)."""

    async def by_call(self, session_id: str, call_id: str, action: Mapping[str, Any]) -> StoredCard | None:
        """The card an agent's tool call already made (its receipt once settled), or None; RequestIdConflict
        when that call made another action."""

    async def card(self, card_id: str) -> StoredCard:
        """One card with its precondition and request."""

    async def listed(self, session_id: str, card_ids: Sequence[str] | None, limit: int) -> list[ApprovalCard]:
        """The named cards, or the waiting ones oldest first."""

    async def in_status(self, status: ApprovalStatus) -> list[str]:
        """The IDs of the cards in a status, oldest first."""

    async def move(
        self,
        card_id: str,
        to: ApprovalStatus,
        now: datetime,
        *,
        decision: Mapping[str, Any] | None = None,
        review: Mapping[str, Any] | None = None,
        receipt: Mapping[str, Any] | None = None,
        lease: Mapping[str, Any] | None = None,
        outcome: str | None = None,
    ) -> ApprovalCard | None:
        """Move a card forward if its status allows (None if it had moved elsewhere); `outcome` is the text of
        the history message that tells a settled card's outcome, saved in the same step."""

    async def record_review(self, card_id: str, review: Mapping[str, Any], now: datetime) -> None:
        """Save the review of a card that keeps waiting for its owner."""

    async def decide(
        self,
        session_id: str,
        card_id: str,
        digest: str,
        expected_revision: int,
        decision: Mapping[str, Any],
        request_id: str,
        now: datetime,
    ) -> tuple[ApprovalCard, bool]:
        """The owner's decision at the exact digest and revision: (the card, whether it was a retry)."""

    async def expire(self, now: datetime) -> list[ApprovalCard]:
        """Expire the cards past their time; the expired."""

    async def recover(self, now: datetime) -> list[ApprovalCard]:
        """Turn every claim left running into an unknown outcome; those cards."""

    async def rules(self) -> list[ApprovalRule]:
        """The space's rules."""

    async def save_rule(
        self,
        rule_id: str,
        card_id: str,
        kind: str,
        match: Mapping[str, Any],
        match_digest: str,
        mode: ApprovalRuleMode,
        request_id: str,
        now: datetime,
    ) -> ApprovalRule:
        """Save a previewed rule (or set the mode of the rule with that match)."""

    async def update_rule(
        self,
        rule_id: str,
        expected_revision: int,
        mode: ApprovalRuleMode | None,
        paused: bool | None,
        request_id: str,
        now: datetime,
    ) -> ApprovalRule:
        """Change a rule's mode or pause it."""

    async def delete_rule(self, rule_id: str, expected_revision: int, request_id: str, now: datetime) -> str:
        """Delete a rule."""

    async def review_settings(self) -> ReviewSettings:
        """The automatic-review setting."""

    async def set_review(
        self, automatic_review: bool, expected_revision: int, request_id: str, now: datetime
    ) -> ReviewSettings:
        """The owner's explicit automatic-review choice."""
