"""The bundled store's approval ledger: cards (`approvals`), rules and the review setting (`rules`). Each call
hands its rule function to the database, which runs a write on its single writer."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import ApprovalCard, ApprovalRule, ApprovalRuleMode, ApprovalStatus, ReviewSettings

from ..approval_ledger import NewCard, StoredCard
from . import approvals, rules
from .database import Database


class SqliteApprovalLedger:
    """The approval ledger of one space's store."""

    def __init__(self, database: Database, main_session_id: str) -> None:
        self.database = database
        self.main_session_id = main_session_id

    async def create(self, card_id: str, new: NewCard, now: datetime) -> tuple[StoredCard, bool]:
        main = self.main_session_id
        return await self.database.write(approvals.create, main, card_id, new, now)

    async def by_call(self, session_id: str, call_id: str, action: Mapping[str, Any]) -> StoredCard | None:
        return await self.database.read(lambda c: approvals.by_call(c, session_id, call_id, action))

    async def card(self, card_id: str) -> StoredCard:
        return await self.database.read(lambda c: approvals.card(c, card_id))

    async def listed(self, session_id: str, card_ids: Sequence[str] | None, limit: int) -> list[ApprovalCard]:
        main = self.main_session_id
        return await self.database.read(lambda c: approvals.listed(c, main, session_id, card_ids, limit))

    async def in_status(self, status: ApprovalStatus) -> list[str]:
        return await self.database.read(lambda c: approvals.in_status(c, status))

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
        return await self.database.write(
            _move,
            card_id,
            to,
            now,
            decision=decision,
            review=review,
            receipt=receipt,
            lease=lease,
            outcome=outcome,
        )

    async def record_review(self, card_id: str, review: Mapping[str, Any], now: datetime) -> None:
        await self.database.write(approvals.record_review, card_id, review, now)

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
        main = self.main_session_id
        return await self.database.write(
            approvals.decide, main, session_id, card_id, digest, expected_revision, decision, request_id, now
        )

    async def expire(self, now: datetime) -> list[ApprovalCard]:
        return await self.database.write(approvals.expire, now)

    async def recover(self, now: datetime) -> list[ApprovalCard]:
        return await self.database.write(approvals.recover, now)

    async def rules(self) -> list[ApprovalRule]:
        return await self.database.read(rules.rules)

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
        return await self.database.write(
            rules.save, rule_id, card_id, kind, match, match_digest, mode, request_id, now
        )

    async def update_rule(
        self,
        rule_id: str,
        expected_revision: int,
        mode: ApprovalRuleMode | None,
        paused: bool | None,
        request_id: str,
        now: datetime,
    ) -> ApprovalRule:
        return await self.database.write(
            rules.update, rule_id, expected_revision, mode, paused, request_id, now
        )

    async def delete_rule(self, rule_id: str, expected_revision: int, request_id: str, now: datetime) -> str:
        return await self.database.write(rules.delete, rule_id, expected_revision, request_id, now)

    async def review_settings(self) -> ReviewSettings:
        return await self.database.read(rules.settings)

    async def set_review(
        self, automatic_review: bool, expected_revision: int, request_id: str, now: datetime
    ) -> ReviewSettings:
        return await self.database.write(
            rules.set_review, automatic_review, expected_revision, request_id, now
        )


def _move(
    connection: sqlite3.Connection,
    card_id: str,
    to: ApprovalStatus,
    now: datetime,
    *,
    decision: Mapping[str, Any] | None,
    review: Mapping[str, Any] | None,
    receipt: Mapping[str, Any] | None,
    lease: Mapping[str, Any] | None,
    outcome: str | None,
) -> ApprovalCard | None:
    """Move the card, and record the outcome message of a move that has one."""
    moved = approvals.move(
        connection, card_id, to, now, decision=decision, review=review, receipt=receipt, lease=lease
    )
    if moved is not None and outcome is not None:
        approvals.outcome_message(connection, moved, outcome, now)
    return moved
