"""The owner's approval rules and the automatic-review setting of the space in the bundled store
(spec/schema/userhost/approvals.schema.json). There is one rule per exact match: saving a rule for a match that
already has one sets that rule's mode. Every write is idempotent by its business request ID."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from wuu.generated.models import ApprovalRule, ApprovalRuleMode, ReviewSettings

from ..refusals import RuleNotFound, StaleRevision
from ..stamps import rfc3339
from . import requests

RULE_COLUMNS = "rule_id, kind, match, mode, paused, revision, created_at, updated_at, source_card_id"


def _rule(row: Sequence[Any]) -> ApprovalRule:
    rule_id, kind, match, mode, paused, revision, created_at, updated_at, source_card_id = row
    return ApprovalRule.model_validate(
        {
            "rule_id": rule_id,
            "kind": kind,
            "match": orjson.loads(match),
            "mode": mode,
            "paused": bool(paused),
            "revision": revision,
            "created_at": created_at,
            "updated_at": updated_at,
            "source_card_id": source_card_id,
        }
    )


def rule(connection: sqlite3.Connection, rule_id: str) -> ApprovalRule:
    """The rule. RuleNotFound."""
    row = connection.execute(
        f"SELECT {RULE_COLUMNS} FROM approval_rules WHERE rule_id = ?", (rule_id,)
    ).fetchone()
    if row is None:
        raise RuleNotFound(f"no rule {rule_id}")
    return _rule(row)


def rules(connection: sqlite3.Connection) -> list[ApprovalRule]:
    """Every rule of the space, oldest first."""
    rows = connection.execute(
        f"SELECT {RULE_COLUMNS} FROM approval_rules ORDER BY created_at, rule_id"
    ).fetchall()
    return [_rule(row) for row in rows]


def save(
    connection: sqlite3.Connection,
    rule_id: str,
    card_id: str,
    kind: str,
    match: Mapping[str, Any],
    match_digest: str,
    mode: ApprovalRuleMode,
    request_id: str,
    now: datetime,
) -> ApprovalRule:
    """Save the rule of a card's previewed match, or set the mode of the rule that has that match already (and
    resume it). It decides no card."""
    params = {"card_id": card_id, "match_digest": match_digest, "mode": mode.value}
    saved = requests.replayed(connection, request_id, "approvals.rules.save", params)
    if saved is not None:
        return rule(connection, saved)
    stamp = rfc3339(now)
    found = connection.execute(
        "SELECT rule_id FROM approval_rules WHERE match_digest = ?", (match_digest,)
    ).fetchone()
    if found is None:
        connection.execute(
            "INSERT INTO approval_rules (rule_id, kind, match, match_digest, mode, paused, revision, created_at, "
            "updated_at, source_card_id) VALUES (?, ?, ?, ?, ?, 0, 1, ?, ?, ?)",
            (
                rule_id,
                kind,
                orjson.dumps(match, option=orjson.OPT_SORT_KEYS).decode(),
                match_digest,
                mode.value,
                stamp,
                stamp,
                card_id,
            ),
        )
    else:
        rule_id = found[0]
        connection.execute(
            "UPDATE approval_rules SET mode = ?, paused = 0, revision = revision + 1, updated_at = ? "
            "WHERE rule_id = ?",
            (mode.value, stamp, rule_id),
        )
    requests.save(connection, request_id, "approvals.rules.save", params, rule_id, now)
    return rule(connection, rule_id)


def _current(connection: sqlite3.Connection, rule_id: str, expected_revision: int) -> ApprovalRule:
    current = rule(connection, rule_id)
    if current.revision != expected_revision:
        raise StaleRevision(f"rule {rule_id} is at revision {current.revision}, not {expected_revision}")
    return current


def update(
    connection: sqlite3.Connection,
    rule_id: str,
    expected_revision: int,
    mode: ApprovalRuleMode | None,
    paused: bool | None,
    request_id: str,
    now: datetime,
) -> ApprovalRule:
    """Switch a rule between automatic and asking first, pause or resume it. RuleNotFound; StaleRevision."""
    params = {
        "rule_id": rule_id,
        "expected_revision": expected_revision,
        "mode": None if mode is None else mode.value,
        "paused": paused,
    }
    if requests.replayed(connection, request_id, "approvals.rules.update", params) is not None:
        return rule(connection, rule_id)
    current = _current(connection, rule_id, expected_revision)
    wanted = (mode or current.mode, current.paused if paused is None else paused)
    if wanted != (current.mode, current.paused):  # a call that changes nothing keeps the revision
        connection.execute(
            "UPDATE approval_rules SET mode = ?, paused = ?, revision = revision + 1, updated_at = ? "
            "WHERE rule_id = ?",
            (wanted[0].value, wanted[1], rfc3339(now), rule_id),
        )
    requests.save(connection, request_id, "approvals.rules.update", params, rule_id, now)
    return rule(connection, rule_id)


def delete(
    connection: sqlite3.Connection, rule_id: str, expected_revision: int, request_id: str, now: datetime
) -> str:
    """Delete a rule; its ID. A retry of the saved deletion answers the same. RuleNotFound; StaleRevision."""
    params = {"rule_id": rule_id, "expected_revision": expected_revision}
    if requests.replayed(connection, request_id, "approvals.rules.delete", params) is not None:
        return rule_id
    _current(connection, rule_id, expected_revision)
    connection.execute("DELETE FROM approval_rules WHERE rule_id = ?", (rule_id,))
    requests.save(connection, request_id, "approvals.rules.delete", params, rule_id, now)
    return rule_id


def settings(connection: sqlite3.Connection) -> ReviewSettings:
    """The space's automatic-review setting: on, and not an explicit choice, until the owner sets it."""
    row = connection.execute("SELECT automatic_review, revision FROM review_settings WHERE id = 1").fetchone()
    if row is None:
        return ReviewSettings(automatic_review=True, explicit=False, revision=0)
    return ReviewSettings(automatic_review=bool(row[0]), explicit=True, revision=row[1])


def set_review(
    connection: sqlite3.Connection,
    automatic_review: bool,
    expected_revision: int,
    request_id: str,
    now: datetime,
) -> ReviewSettings:
    """The owner's explicit choice of automatic review. StaleRevision."""
    params = {"automatic_review": automatic_review, "expected_revision": expected_revision}
    if requests.replayed(connection, request_id, "approvals.review.set", params) is not None:
        return settings(connection)
    current = settings(connection)
    if current.revision != expected_revision:
        raise StaleRevision(f"the review setting is at revision {current.revision}, not {expected_revision}")
    connection.execute(
        "INSERT INTO review_settings (id, automatic_review, revision, updated_at) VALUES (1, ?, 1, ?) "
        "ON CONFLICT (id) DO UPDATE SET automatic_review = excluded.automatic_review, "
        "revision = revision + 1, updated_at = excluded.updated_at",
        (automatic_review, rfc3339(now)),
    )
    requests.save(connection, request_id, "approvals.review.set", params, "review", now)
    return settings(connection)
