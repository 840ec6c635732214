"""Who decides an action, as plain functions over records (spec/schema/userhost/approvals.schema.json): the
owner's rules, automatic review and the 30-minute expiry of a background task's card. Nothing here waits,
writes or runs: the approval service applies what these functions say.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from wuu.generated.models import ApprovalRule, ApprovalRuleMode
from wuu.generated.wire import WireModel

TASK_CARD_LIFETIME = timedelta(minutes=30)
"""How long a background task's card waits; a main-chat card has no fixed expiry."""
RULED_TOOLS = frozenset({"write_file", "edit_file", "exec_command"})
"""The tools a rule can handle: interactive processes and their input always ask."""


def digest(value: Any) -> str:
    """`sha256:` and the hex digest of the canonical JSON of `value` (keys sorted, no spaces)."""
    return "sha256:" + hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class RuleMatch:
    """What a rule for an action matches: the same operation at the exact path, or the entire invocation."""

    kind: str
    """`file` or `command`."""
    match: Mapping[str, Any]

    @property
    def digest(self) -> str:
        """The match's identity: one rule per match, and the preview's digest."""
        return digest({"kind": self.kind, "match": dict(self.match)})


def rule_match(action: Mapping[str, Any], resolved_command: str | None) -> RuleMatch | None:
    """The match a rule for this action would have, or None for an action no rule may handle."""
    tool = action["tool"]
    if tool not in RULED_TOOLS:
        return None
    if tool in ("write_file", "edit_file"):
        return RuleMatch("file", {"path": action["path"], "operation": tool})
    return RuleMatch(
        "command",
        {
            "argv": list(action["argv"]),
            "resolved_command": resolved_command,
            "cwd": action["cwd"],
            "env": dict(action["env"]),
            "permission_mode": "standard",
        },
    )


@dataclass(frozen=True)
class RuleDecision:
    """What the owner's rules say of an action: ask the owner, allow it by a rule, or nothing."""

    ask_first: ApprovalRule | None = None
    automatic: ApprovalRule | None = None


def by_rules(rules: Iterable[ApprovalRule], match: RuleMatch | None) -> RuleDecision:
    """The rules that handle the match, paused ones aside; asking first takes precedence."""
    if match is None:
        return RuleDecision()
    matching = [
        rule
        for rule in rules
        if not rule.paused and rule.kind.value == match.kind and _same(rule.match, match.match)
    ]
    ask = next((rule for rule in matching if rule.mode == ApprovalRuleMode.ASK_FIRST), None)
    if ask is not None:
        return RuleDecision(ask_first=ask)
    return RuleDecision(automatic=next(iter(matching), None))


def _same(saved: WireModel, match: Mapping[str, Any]) -> bool:
    return digest(saved.model_dump(mode="json")) == digest(dict(match))


def rule_still_allows(rules: Iterable[ApprovalRule], rule_id: str, match: RuleMatch | None) -> bool:
    """Right before a rule-approved action starts: whether the rule that approved it still does (it exists,
    is not paused, handles it automatically, and no rule asks first). A revoked rule stops unstarted work."""
    decision = by_rules(rules, match)
    return decision.automatic is not None and decision.automatic.rule_id == rule_id


def expires_at(source: str, created: datetime) -> datetime | None:
    """When a card stops waiting: 30 minutes after a background task made it; never for the main chat."""
    return created + TASK_CARD_LIFETIME if source == "task" else None
