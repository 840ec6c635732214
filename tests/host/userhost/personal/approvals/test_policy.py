"""Who decides an action, as plain functions (spec/schema/userhost/approvals.schema.json): a file rule matches the
exact path and operation, a command rule the entire invocation, asking first takes precedence, paused rules do
nothing, a rule change stops unstarted work it allowed, and only background-task cards expire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from wuu.generated.models import ApprovalRule
from wuu.host.userhost.personal.approvals.policy import (
    by_rules,
    digest,
    expires_at,
    rule_match,
    rule_still_allows,
)

WRITE = {"tool": "write_file", "path": "notes/todo.txt", "content": "milk\n", "create_dirs": True}
RUN = {"tool": "exec_command", "argv": ["ls", "-l"], "cwd": ".", "env": {}, "timeout_ms": 1000}


def rule(
    rule_id: str, match: Any, *, kind: str = "file", mode: str = "automatic", paused: bool = False
) -> ApprovalRule:
    return ApprovalRule.model_validate(
        {
            "rule_id": rule_id,
            "kind": kind,
            "match": match.match if hasattr(match, "match") else match,
            "mode": mode,
            "paused": paused,
            "revision": 1,
            "created_at": "2026-03-01T12:00:00Z",
            "updated_at": "2026-03-01T12:00:00Z",
            "source_card_id": "card_" + "1" * 32,
        }
    )


RULE_A = "rule_" + "a" * 32
RULE_B = "rule_" + "b" * 32


def test_a_file_rule_matches_only_the_same_operation_at_the_exact_path() -> None:
    match = rule_match(WRITE, None)
    assert match is not None and match.kind == "file"
    saved = [rule(RULE_A, match)]
    assert by_rules(saved, match).automatic is not None
    for other in (
        {**WRITE, "path": "notes/todo.txt.bak"},
        {**WRITE, "path": "notes"},
        {
            "tool": "edit_file",
            "path": "notes/todo.txt",
            "old_string": "a",
            "new_string": "b",
            "replace_all": False,
        },
    ):
        assert by_rules(saved, rule_match(other, None)).automatic is None, other
    # Content is not part of a file rule: future content changes at that path and operation are permitted.
    assert by_rules(saved, rule_match({**WRITE, "content": "eggs\n"}, None)).automatic is not None


def test_a_command_rule_matches_the_entire_invocation_never_a_prefix() -> None:
    match = rule_match(RUN, "/usr/bin/ls")
    assert match is not None and match.kind == "command"
    saved = [rule(RULE_A, match, kind="command")]
    assert by_rules(saved, match).automatic is not None
    for other, resolved in (
        ({**RUN, "argv": ["ls", "-l", "/"]}, "/usr/bin/ls"),
        ({**RUN, "argv": ["ls"]}, "/usr/bin/ls"),
        ({**RUN, "cwd": "notes"}, "/usr/bin/ls"),
        ({**RUN, "env": {"LANG": "C"}}, "/usr/bin/ls"),
        (RUN, "/usr/local/bin/ls"),
    ):
        assert by_rules(saved, rule_match(other, resolved)).automatic is None, other


def test_asking_first_takes_precedence_and_paused_rules_do_nothing() -> None:
    match = rule_match(WRITE, None)
    automatic, asking = rule(RULE_A, match), rule(RULE_B, match, mode="ask_first")
    assert by_rules([automatic, asking], match).ask_first == asking
    assert by_rules([automatic, asking], match).automatic is None
    paused_ask = rule(RULE_B, match, mode="ask_first", paused=True)
    assert by_rules([automatic, paused_ask], match).automatic == automatic
    assert by_rules([rule(RULE_A, match, paused=True)], match).automatic is None


def test_interactive_processes_and_their_input_are_never_ruled() -> None:
    assert (
        rule_match({"tool": "process_start", "argv": ["python3"], "cwd": ".", "env": {}}, "/usr/bin/python3")
        is None
    )
    assert rule_match({"tool": "process_write", "process_id": "proc_1", "data": "x\n"}, None) is None


def test_a_changed_rule_no_longer_allows_what_it_allowed() -> None:
    match = rule_match(WRITE, None)
    assert rule_still_allows([rule(RULE_A, match)], RULE_A, match)
    assert not rule_still_allows([], RULE_A, match)
    assert not rule_still_allows([rule(RULE_A, match, paused=True)], RULE_A, match)
    assert not rule_still_allows([rule(RULE_A, match, mode="ask_first")], RULE_A, match)
    assert not rule_still_allows([rule(RULE_A, match), rule(RULE_B, match, mode="ask_first")], RULE_A, match)


def test_only_background_task_cards_expire_after_30_minutes() -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert expires_at("main_chat", now) is None
    assert expires_at("task", now) == now + timedelta(minutes=30)


def test_the_digest_is_canonical_json() -> None:
    assert digest({"b": 1, "a": [1, "x"]}) == digest({"a": [1, "x"], "b": 1})
    assert digest({"a": 1}) != digest({"a": "1"})
    assert digest({}).startswith("sha256:") and len(digest({})) == 71
