"""The approval rules of the bundled store on a bare SQLite file (spec/schema/userhost/approvals.schema.json):
cards and their history anchors, the owner's exact-digest decision, idempotent request IDs, forward-only
statuses, expiry, the unknown outcome of a claim left running, rules (one per match) and the review setting."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from wuu.generated.models import ApprovalRuleMode, ApprovalStatus
from wuu.host.userhost.personal.approval_ledger import NewCard
from wuu.host.userhost.personal.refusals import CardNotFound, RequestIdConflict, RuleNotFound, StaleRevision
from wuu.host.userhost.personal.sqlite import approvals, history, rules

from .conftest import Store

ACTION = {"tool": "write_file", "path": "notes/todo.txt", "content": "milk\n", "create_dirs": True}
PREVIEW = {
    "kind": "file",
    "path": "notes/todo.txt",
    "operation": "write_file",
    "original": {"state": "missing"},
    "content": "milk\n",
}
DIGEST = "sha256:" + "a" * 64
MATCH = {"path": "notes/todo.txt", "operation": "write_file"}


def new_card(store: Store, call_id: str = "call-1", **changes: Any) -> NewCard:
    fields: dict[str, Any] = {
        "session_id": store.main,
        "call_id": call_id,
        "source": "main_chat",
        "task_id": None,
        "action": ACTION,
        "digest": DIGEST,
        "precondition": {"state": "missing"},
        "preview": PREVIEW,
        "summary": "Create notes/todo.txt (5 bytes)",
        "request_text": "/write notes/todo.txt",
        "expires_at": None,
    }
    return NewCard(**{**fields, **changes})


def create(store: Store, card_id: str = "card_" + "1" * 32, **changes: Any) -> approvals.StoredCard:
    stored, existed = approvals.create(
        store.connection, store.main, card_id, new_card(store, **changes), store.clock()
    )
    assert not existed
    return stored


def decide(
    store: Store,
    card_id: str,
    revision: int,
    verdict: str = "allow",
    request_id: str = "d-1",
    digest: str = DIGEST,
) -> Any:
    return approvals.decide(
        store.connection,
        store.main,
        store.main,
        card_id,
        digest,
        revision,
        {"by": "owner", "verdict": verdict},
        request_id,
        store.clock(),
    )


def test_a_card_waits_at_revision_one_with_its_anchor_in_history(store: Store) -> None:
    card = create(store).card
    assert (card.status, card.revision, card.source.value) == (ApprovalStatus.WAITING, 1, "main_chat")
    [anchor] = history.page(store.connection, store.main, store.main, None, 10)
    assert (anchor.message_seq, anchor.role.value, anchor.text) == (
        card.message_seq,
        "assistant",
        card.summary,
    )
    assert anchor.approval_id == card.card_id


def test_the_same_tool_call_finds_its_card_and_another_action_under_it_conflicts(store: Store) -> None:
    card = create(store).card
    again, existed = approvals.create(
        store.connection, store.main, "card_" + "2" * 32, new_card(store), store.clock()
    )
    assert existed and again.card.card_id == card.card_id
    assert store.count("approval_cards") == 1 and store.count("messages") == 1
    with pytest.raises(RequestIdConflict):
        approvals.create(
            store.connection,
            store.main,
            "card_" + "3" * 32,
            new_card(store, action={**ACTION, "content": "eggs\n"}),
            store.clock(),
        )


def test_allow_once_needs_the_exact_digest_and_revision(store: Store) -> None:
    card = create(store).card
    with pytest.raises(StaleRevision, match="digest"):
        decide(store, card.card_id, 1, digest="sha256:" + "b" * 64)
    with pytest.raises(StaleRevision, match="revision 1"):
        decide(store, card.card_id, 2)
    decided, replayed = decide(store, card.card_id, 1)
    assert (decided.status, decided.revision, replayed) == (ApprovalStatus.APPROVED, 2, False)
    assert decided.decision.by.value == "owner" and decided.decision.verdict.value == "allow"


def test_a_retried_decision_gets_the_card_as_it_is_now_and_a_reused_request_id_conflicts(
    store: Store,
) -> None:
    card = create(store).card
    decide(store, card.card_id, 1)
    claimed = approvals.move(store.connection, card.card_id, ApprovalStatus.RUNNING, store.clock())
    assert claimed is not None
    again, replayed = decide(store, card.card_id, 1)
    assert replayed and again.status == ApprovalStatus.RUNNING and again.revision == 3
    other = create(store, "card_" + "4" * 32, call_id="call-2").card
    with pytest.raises(RequestIdConflict):
        decide(store, other.card_id, 1)
    with pytest.raises(RequestIdConflict):
        decide(store, card.card_id, 1, verdict="deny")


def test_a_settled_card_cannot_be_decided_again(store: Store) -> None:
    card = create(store).card
    decide(store, card.card_id, 1, verdict="deny")
    with pytest.raises(StaleRevision, match="denied"):
        decide(store, card.card_id, 2, request_id="d-2")


def test_statuses_only_move_forward(store: Store) -> None:
    card = create(store).card
    assert approvals.move(store.connection, card.card_id, ApprovalStatus.RUNNING, store.clock()) is None
    assert approvals.move(store.connection, card.card_id, ApprovalStatus.DENIED, store.clock()) is not None
    for to in ApprovalStatus:
        assert approvals.move(store.connection, card.card_id, to, store.clock()) is None
    with pytest.raises(CardNotFound):
        approvals.move(store.connection, "card_" + "9" * 32, ApprovalStatus.DENIED, store.clock())


def test_only_background_task_cards_expire(store: Store) -> None:
    main = create(store).card
    task = create(
        store,
        "card_" + "5" * 32,
        call_id="call-2",
        source="task",
        task_id="t1",
        expires_at=store.clock.now + timedelta(minutes=30),
    ).card
    assert approvals.expire(store.connection, store.clock.now + timedelta(minutes=29)) == []
    [expired] = approvals.expire(store.connection, store.clock.now + timedelta(minutes=30))
    assert (expired.card_id, expired.status) == (task.card_id, ApprovalStatus.EXPIRED)
    [waiting] = approvals.listed(store.connection, store.main, store.main, None, 100)
    assert waiting.card_id == main.card_id


def test_a_claim_left_running_has_an_unknown_outcome_and_is_not_run_again(store: Store) -> None:
    card = create(store).card
    decide(store, card.card_id, 1)
    approvals.move(store.connection, card.card_id, ApprovalStatus.RUNNING, store.clock())
    [unknown] = approvals.recover(store.connection, store.clock())
    assert unknown.status == ApprovalStatus.UNKNOWN
    assert unknown.receipt is not None and unknown.receipt.outcome.value == "unknown"
    assert unknown.receipt.finished_at is None
    outcome = history.page(store.connection, store.main, store.main, None, 1)[0]
    assert (outcome.text, outcome.approval_id) == (f"Outcome unknown: {card.summary}", card.card_id)
    assert approvals.in_status(store.connection, ApprovalStatus.APPROVED) == []
    assert approvals.recover(store.connection, store.clock()) == []


def test_listing_names_cards_in_order_and_refuses_an_unknown_one(store: Store) -> None:
    first = create(store).card
    second = create(store, "card_" + "6" * 32, call_id="call-2").card
    named = approvals.listed(store.connection, store.main, store.main, [second.card_id, first.card_id], 100)
    assert [card.card_id for card in named] == [second.card_id, first.card_id]
    with pytest.raises(CardNotFound):
        approvals.listed(store.connection, store.main, store.main, ["card_" + "9" * 32], 100)


def save_rule(
    store: Store, request_id: str = "r-1", mode: ApprovalRuleMode = ApprovalRuleMode.AUTOMATIC
) -> Any:
    return rules.save(
        store.connection,
        "rule_" + "1" * 32,
        "card_" + "1" * 32,
        "file",
        MATCH,
        "sha256:" + "c" * 64,
        mode,
        request_id,
        store.clock(),
    )


def test_one_rule_per_match_and_saving_again_sets_its_mode(store: Store) -> None:
    rule = save_rule(store)
    assert (rule.mode, rule.paused, rule.revision) == (ApprovalRuleMode.AUTOMATIC, False, 1)
    assert save_rule(store) == rule  # a retry
    again = save_rule(store, "r-2", ApprovalRuleMode.ASK_FIRST)
    assert (again.rule_id, again.mode, again.revision) == (rule.rule_id, ApprovalRuleMode.ASK_FIRST, 2)
    assert len(rules.rules(store.connection)) == 1


def test_rule_changes_are_revision_checked_and_idempotent(store: Store) -> None:
    rule = save_rule(store)
    with pytest.raises(StaleRevision):
        rules.update(store.connection, rule.rule_id, 2, None, True, "u-1", store.clock())
    paused = rules.update(store.connection, rule.rule_id, 1, None, True, "u-1", store.clock())
    assert (paused.paused, paused.revision) == (True, 2)
    assert rules.update(store.connection, rule.rule_id, 1, None, True, "u-1", store.clock()) == paused
    assert rules.delete(store.connection, rule.rule_id, 2, "x-1", store.clock()) == rule.rule_id
    assert rules.delete(store.connection, rule.rule_id, 2, "x-1", store.clock()) == rule.rule_id
    assert rules.rules(store.connection) == []
    with pytest.raises(RuleNotFound):
        rules.delete(store.connection, rule.rule_id, 2, "x-2", store.clock())


def test_automatic_review_is_on_until_the_owner_chooses(store: Store) -> None:
    initial = rules.settings(store.connection)
    assert (initial.automatic_review, initial.explicit, initial.revision) == (True, False, 0)
    with pytest.raises(StaleRevision):
        rules.set_review(store.connection, False, 1, "s-1", store.clock())
    chosen = rules.set_review(store.connection, False, 0, "s-1", store.clock())
    assert (chosen.automatic_review, chosen.explicit, chosen.revision) == (False, True, 1)
    assert rules.set_review(store.connection, False, 0, "s-1", store.clock()) == chosen
    with pytest.raises(RequestIdConflict):
        rules.set_review(store.connection, True, 1, "s-1", store.clock())
