"""The approval service on the bundled store, the real files root and a real native worker (spec/schema/userhost/
approvals.schema.json): allow once runs exactly once, denial never runs, stale digests and changed files stop
execution, rules handle what they match and never approve waiting cards, automatic review allows, denies or
leaves the owner to decide, and a claim whose outcome was lost is never run again."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wuu.generated.models import ApprovalCard, ApprovalRuleMode, ApprovalStatus
from wuu.host.userhost.personal.approvals.execution import ActionExecutor, WorkerActions
from wuu.host.userhost.personal.approvals.files import FilesRoot
from wuu.host.userhost.personal.approvals.service import ACTIONS, ActionRefused, ApprovalService
from wuu.host.userhost.personal.model import StandInModel
from wuu.host.userhost.personal.refusals import StaleRevision
from wuu.host.userhost.personal.reviewer import Reviewer
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@dataclass
class Space:
    """A Personal space's approval service with its store, files root and worker."""

    store: SqliteSessionDomain
    files: Path
    service: ApprovalService
    clock: Clock
    admitted: list[Coroutine[Any, Any, None]]
    changed: list[ApprovalCard]

    async def run_admitted(self) -> int:
        """Run the executions the service admitted; how many there were."""
        count = 0
        while self.admitted:
            await self.admitted.pop(0)
            count += 1
        return count

    async def propose(
        self, action: dict[str, Any], request: str = "", call_id: str | None = None, **extra: Any
    ) -> ApprovalCard:
        return await self.service.propose(
            self.store.main_session_id,
            call_id or f"call-{len(self.changed)}-{action['tool']}",
            ACTIONS.validate_python(action),
            request,
            **extra,
        )

    async def decide(
        self, card: ApprovalCard, allow: bool = True, request_id: str | None = None
    ) -> ApprovalCard:
        return await self.service.decide(
            self.store.main_session_id,
            card.card_id,
            card.digest,
            card.revision,
            allow,
            request_id or f"decide-{card.card_id}",
        )

    async def card(self, card: ApprovalCard) -> ApprovalCard:
        [found] = await self.service.listed(self.store.main_session_id, [card.card_id])
        return found


async def open_space(tmp_path: Path, clock: Clock) -> tuple[SqliteSessionDomain, ActionExecutor, Space]:
    state, files = tmp_path / "state", tmp_path / "files"
    state.mkdir(exist_ok=True)
    files.mkdir(exist_ok=True)
    store = await SqliteSessionDomain.open(state, "local", "personal", clock())
    executor = ActionExecutor(files, session=store.main_session_id)
    admitted: list[Coroutine[Any, Any, None]] = []
    changed: list[ApprovalCard] = []
    service = ApprovalService(
        store.approval_ledger(),
        FilesRoot(files),
        WorkerActions(executor),
        Reviewer(StandInModel(), timeout=5),
        clock,
        admitted.append,
        changed.append,
    )
    return store, executor, Space(store, files, service, clock, admitted, changed)


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    store, executor, opened = await open_space(tmp_path, Clock())
    try:
        yield opened
    finally:
        for work in opened.admitted:
            work.close()
        await executor.close()
        await store.close()


def write(path: str = "notes/todo.txt", content: str = "milk\n") -> dict[str, Any]:
    return {"tool": "write_file", "path": path, "content": content, "create_dirs": True}


async def test_allow_once_runs_the_displayed_action_exactly_once(space: Space) -> None:
    card = await space.propose(write(), "/write notes/todo.txt")
    assert card.status == ApprovalStatus.WAITING and card.summary == "Create notes/todo.txt (5 bytes)"
    assert card.review is not None and card.review.verdict.value == "unsure"  # the stand-in has no judgment
    assert not (space.files / "notes/todo.txt").exists()
    approved = await space.decide(card)
    assert approved.status == ApprovalStatus.APPROVED
    assert await space.run_admitted() == 1
    assert (space.files / "notes/todo.txt").read_text() == "milk\n"
    done = await space.card(card)
    assert done.status == ApprovalStatus.SUCCEEDED and done.receipt is not None
    assert (done.receipt.outcome.value, done.receipt.digest, done.receipt.is_error) == (
        "succeeded",
        card.digest,
        False,
    )
    again = await space.decide(card)  # the same request, retried
    assert again.status == ApprovalStatus.SUCCEEDED and await space.run_admitted() == 0
    messages = await space.store.history(space.store.main_session_id, None, 10)
    assert [(m.text, m.approval_id) for m in reversed(messages)] == [
        ("Create notes/todo.txt (5 bytes)", card.card_id),
        ("Done: Create notes/todo.txt (5 bytes)", card.card_id),
    ]
    statuses = [changed.status for changed in space.changed if changed.card_id == card.card_id]
    assert statuses == [
        ApprovalStatus.WAITING,
        ApprovalStatus.APPROVED,
        ApprovalStatus.RUNNING,
        ApprovalStatus.SUCCEEDED,
    ]


async def test_a_denied_command_never_runs(space: Space) -> None:
    card = await space.propose(
        {"tool": "exec_command", "argv": ["touch", "ran"], "cwd": ".", "env": {}, "timeout_ms": 10_000}
    )
    assert card.preview.resolved_command == "/usr/bin/touch"
    denied = await space.decide(card, allow=False)
    assert denied.status == ApprovalStatus.DENIED and await space.run_admitted() == 0
    assert not (space.files / "ran").exists()
    with pytest.raises(StaleRevision):
        await space.decide(denied, request_id="again")


async def test_a_command_runs_and_its_receipt_keeps_the_exit_code(space: Space) -> None:
    card = await space.propose(
        {
            "tool": "exec_command",
            "argv": ["sh", "-c", "echo hi; exit 3"],
            "cwd": ".",
            "env": {},
            "timeout_ms": 10_000,
        }
    )
    await space.decide(card)
    await space.run_admitted()
    done = await space.card(card)
    assert done.status == ApprovalStatus.FAILED and done.receipt is not None
    assert (done.receipt.exit_code, done.receipt.is_error) == (3, True) and "hi" in done.receipt.text


async def test_a_stale_digest_or_revision_is_refused(space: Space) -> None:
    card = await space.propose(write())
    with pytest.raises(StaleRevision):
        await space.service.decide(
            space.store.main_session_id, card.card_id, "sha256:" + "0" * 64, card.revision, True, "d"
        )
    with pytest.raises(StaleRevision):
        await space.service.decide(
            space.store.main_session_id, card.card_id, card.digest, card.revision - 1, True, "d2"
        )
    assert (await space.card(card)).status == ApprovalStatus.WAITING


async def test_a_file_changed_after_approval_is_not_touched(space: Space) -> None:
    target = space.files / "plan.txt"
    target.write_text("one\n")
    card = await space.propose(
        {
            "tool": "edit_file",
            "path": "plan.txt",
            "old_string": "one",
            "new_string": "two",
            "replace_all": False,
        }
    )
    assert card.preview.original.text == "one\n"
    await space.decide(card)
    target.write_text("one, changed\n")
    await space.run_admitted()
    stale = await space.card(card)
    assert stale.status == ApprovalStatus.STALE and stale.receipt is None
    assert target.read_text() == "one, changed\n"


async def test_symlinks_multi_link_files_and_protected_paths_get_no_card(space: Space) -> None:
    (space.files / "real.txt").write_text("x")
    os.symlink("real.txt", space.files / "link.txt")
    os.link(space.files / "real.txt", space.files / "twin.txt")
    for path, code in (
        ("link.txt", "symlink"),
        ("twin.txt", "multiple_links"),
        (".env", "sensitive_path"),
        ("attachments/a", "protected_path"),
    ):
        with pytest.raises(ActionRefused) as refused:
            await space.propose(write(path))
        assert refused.value.code == code
    with pytest.raises(ActionRefused) as refused:
        await space.propose(
            {
                "tool": "edit_file",
                "path": "missing.txt",
                "old_string": "a",
                "new_string": "b",
                "replace_all": False,
            }
        )
    assert refused.value.code == "not_regular_file"
    assert await space.service.listed(space.store.main_session_id, None) == []


async def test_a_retried_tool_call_gets_its_card_and_receipt(space: Space) -> None:
    card = await space.propose(write(), call_id="call-x")
    await space.decide(card)
    await space.run_admitted()
    again = await space.propose(write(), call_id="call-x")
    assert (
        again.card_id == card.card_id
        and again.status == ApprovalStatus.SUCCEEDED
        and again.receipt is not None
    )
    assert await space.run_admitted() == 0


async def test_rules_handle_what_they_match_and_never_approve_waiting_cards(space: Space) -> None:
    main = space.store.main_session_id
    first = await space.propose(write())
    waiting = await space.propose(write(), call_id="call-other")
    preview = await space.service.preview_rule(main, first.card_id, first.digest, first.revision)
    assert preview.kind.value == "file" and preview.match.path == "notes/todo.txt"
    rule = await space.service.save_rule(
        main, first.card_id, preview.preview_digest, ApprovalRuleMode.AUTOMATIC, "save-1"
    )
    assert (await space.card(first)).status == ApprovalStatus.WAITING  # saving a rule is not approval
    assert (await space.card(waiting)).status == ApprovalStatus.WAITING  # nor of other cards, in bulk
    handled = await space.propose(write(content="eggs\n"), call_id="call-next")
    assert handled.status == ApprovalStatus.APPROVED and handled.decision.by.value == "rule"
    assert handled.decision.rule_id == rule.rule_id
    await space.run_admitted()
    assert (space.files / "notes/todo.txt").read_text() == "eggs\n"
    asking = await space.service.update_rule(
        rule.rule_id, rule.revision, ApprovalRuleMode.ASK_FIRST, None, "u-1"
    )
    asked = await space.propose(write(content="ham\n"), "/write\nreview: allow", call_id="call-asked")
    assert asked.status == ApprovalStatus.WAITING and asked.review is None  # asking first wins over review
    await space.service.update_rule(rule.rule_id, asking.revision, None, True, "u-2")
    reviewed = await space.propose(write(content="jam\n"), "/write\nreview: allow", call_id="call-reviewed")
    assert reviewed.status == ApprovalStatus.APPROVED and reviewed.decision.by.value == "review"


async def test_a_rule_removed_before_the_effect_starts_stops_it(space: Space) -> None:
    main = space.store.main_session_id
    first = await space.propose(write())
    preview = await space.service.preview_rule(main, first.card_id, first.digest, first.revision)
    rule = await space.service.save_rule(
        main, first.card_id, preview.preview_digest, ApprovalRuleMode.AUTOMATIC, "save-1"
    )
    handled = await space.propose(write(), call_id="call-next")
    assert handled.status == ApprovalStatus.APPROVED
    await space.service.delete_rule(rule.rule_id, rule.revision, "delete-1")
    await space.run_admitted()
    assert (await space.card(handled)).status == ApprovalStatus.STALE
    assert not (space.files / "notes/todo.txt").exists()


async def test_automatic_review_allows_denies_or_leaves_the_owner_to_decide(space: Space) -> None:
    allowed = await space.propose(write("a.txt"), "/write a.txt\nreview: allow")
    assert allowed.status == ApprovalStatus.APPROVED and allowed.decision.by.value == "review"
    await space.run_admitted()
    assert (space.files / "a.txt").exists()
    denied = await space.propose(write("b.txt"), "/write b.txt\nreview: deny")
    assert denied.status == ApprovalStatus.DENIED and await space.run_admitted() == 0
    assert not (space.files / "b.txt").exists()
    failed = await space.propose(write("c.txt"), "/write c.txt\nreview: fail")
    assert failed.status == ApprovalStatus.WAITING and failed.review.verdict.value == "unavailable"
    settings = await space.service.review_settings()
    await space.service.set_review(False, settings.revision, "off")
    unreviewed = await space.propose(write("d.txt"), "/write d.txt\nreview: allow")
    assert unreviewed.status == ApprovalStatus.WAITING and unreviewed.review is None


async def test_a_background_task_card_expires_after_30_minutes(space: Space) -> None:
    card = await space.propose(write(), source="task", task_id="task-1")
    assert card.expires_at is not None
    created, expires = datetime.fromisoformat(card.created_at), datetime.fromisoformat(card.expires_at)
    assert expires - created == timedelta(minutes=30)
    space.clock.now += timedelta(minutes=31)
    assert (await space.card(card)).status == ApprovalStatus.EXPIRED
    with pytest.raises(StaleRevision):
        await space.decide(card)


async def test_a_claim_whose_outcome_was_lost_is_never_run_again(tmp_path: Path) -> None:
    clock = Clock()
    store, executor, first = await open_space(tmp_path, clock)
    card = await first.propose(write())
    await first.decide(card)
    ledger = store.approval_ledger()
    await ledger.move(card.card_id, ApprovalStatus.RUNNING, clock())  # the host dies with the claim written
    for work in first.admitted:
        work.close()
    await executor.close()
    await store.close()
    store, executor, second = await open_space(tmp_path, clock)
    try:
        await second.service.start()
        assert await second.run_admitted() == 0
        unknown = await second.card(card)
        assert unknown.status == ApprovalStatus.UNKNOWN and unknown.receipt.outcome.value == "unknown"
        assert not (second.files / "notes/todo.txt").exists()
    finally:
        await executor.close()
        await store.close()


async def test_input_to_an_interactive_process_is_its_own_card(space: Space) -> None:
    started = await space.propose({"tool": "process_start", "argv": ["cat"], "cwd": ".", "env": {}})
    await space.decide(started)
    await space.run_admitted()
    done = await space.card(started)
    assert done.status == ApprovalStatus.SUCCEEDED, done.receipt
    process_id = done.receipt.process_id
    assert process_id is not None
    line = await space.propose({"tool": "process_write", "process_id": process_id, "data": "hello\n"})
    assert line.status == ApprovalStatus.WAITING and line.preview.argv == ["cat"]
    with pytest.raises(ActionRefused) as refused:
        await space.propose({"tool": "process_write", "process_id": "proc_" + "0" * 32, "data": "x\n"})
    assert refused.value.code == "unknown_process"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"path": "../escaped.txt", "content": "x", "create_dirs": True}, "path"),
        ({"path": "/etc/escaped", "content": "x", "create_dirs": "not a boolean"}, "path"),
        ({"argv": ["true"], "cwd": "notes/../..", "env": {}, "timeout_ms": 1000}, "cwd"),
    ],
)
async def test_a_call_that_leaves_the_root_is_refused_as_such_before_its_pattern(
    space: Space, arguments: dict[str, Any], field: str
) -> None:
    tool = "exec_command" if "argv" in arguments else "write_file"
    told = await space.service.act(space.store.main_session_id, "call-out", tool, arguments, "")
    assert told.startswith(f"refused (path_outside_root): {field} ")
    assert await space.service.listed(space.store.main_session_id, []) == []


async def settled(space: Space, card: ApprovalCard, deadline: float = 10.0) -> ApprovalCard:
    """The card once it left `waiting` and `approved`, running the admitted work meanwhile."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while (found := await space.card(card)).status in (ApprovalStatus.WAITING, ApprovalStatus.APPROVED):
        assert loop.time() < end, f"card {card.card_id} is still {found.status}"
        await space.run_admitted()
        await asyncio.sleep(0.02)
    return found


async def test_input_waiting_for_a_process_that_ended_is_cancelled(space: Space) -> None:
    started = await space.propose(
        {"tool": "process_start", "argv": ["head", "-n", "1"], "cwd": ".", "env": {}}
    )
    await space.decide(started)
    await space.run_admitted()
    process_id = (await space.card(started)).receipt.process_id
    first = await space.propose({"tool": "process_write", "process_id": process_id, "data": "one\n"})
    second = await space.propose({"tool": "process_write", "process_id": process_id, "data": "two\n"})
    await space.decide(first)  # head exits after its one line
    assert (await settled(space, first)).status == ApprovalStatus.SUCCEEDED
    cancelled = await settled(space, second)
    assert cancelled.status == ApprovalStatus.CANCELLED and cancelled.receipt is None
    history = await space.store.history(space.store.main_session_id, None, 50)
    outcomes = [m.text for m in history if m.approval_id == second.card_id and m.text.startswith("Not")]
    assert outcomes == [f"Not done: {second.summary}: process {process_id} ended"]
    with pytest.raises(StaleRevision):
        await space.decide(cancelled)


async def test_input_for_the_processes_of_a_previous_run_is_cancelled_at_start(tmp_path: Path) -> None:
    clock = Clock()
    store, executor, first = await open_space(tmp_path, clock)
    started = await first.propose({"tool": "process_start", "argv": ["cat"], "cwd": ".", "env": {}})
    await first.decide(started)
    await first.run_admitted()
    process_id = (await first.card(started)).receipt.process_id
    line = await first.propose({"tool": "process_write", "process_id": process_id, "data": "x\n"})
    await store.close()  # the host dies: its executor's processes go with it
    await executor.close()
    store, executor, second = await open_space(tmp_path, clock)
    try:
        await second.service.start()
        assert (await second.card(line)).status == ApprovalStatus.CANCELLED
    finally:
        await executor.close()
        await store.close()
