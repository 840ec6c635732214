"""Background tasks that execute under grants (spec/schema/userhost/tasks.schema.json), on the bundled store, the
native provider and a real native worker: who may start a task, the fresh check before each effect, completion on
evidence, stop reaching running work, and recovery after a restart that never replays an effect."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wuu.generated.models import ApprovalCard, ApprovalStatus
from wuu.host.userhost.personal.approvals.execution import ActionExecutor, WorkerActions
from wuu.host.userhost.personal.approvals.files import FilesRoot
from wuu.host.userhost.personal.approvals.service import ApprovalService
from wuu.host.userhost.personal.authorization import GrantRequest
from wuu.host.userhost.personal.memory import MemoryService
from wuu.host.userhost.personal.memory_ledger import Attribution
from wuu.host.userhost.personal.model import StandInModel
from wuu.host.userhost.personal.model_agent import ModelAgent, task_tools
from wuu.host.userhost.personal.provider import TaskStateError
from wuu.host.userhost.personal.reviewer import Reviewer
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain
from wuu.host.userhost.personal.task_runner import TaskGrants, TaskRunner
from wuu.host.userhost.personal.tasks import TaskBoard
from wuu.host.userhost.services import Caller

DEADLINE_S = 20.0
LOCAL = Caller("unix")


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@dataclass
class Space:
    """A Personal space's tasks, approvals and store, with a real worker; admitted work runs on the loop."""

    store: SqliteSessionDomain
    files: Path
    executor: ActionExecutor
    approvals: ApprovalService
    grants: TaskGrants
    runner: TaskRunner
    board: TaskBoard
    clock: Clock
    work: set[asyncio.Task[None]]

    async def start(self, text: str, caller: Caller | None = LOCAL, call_id: str = "call-1") -> str:
        return await self.runner.start(call_id, {"instructions": text}, caller, None)

    async def card_of(self, task_id: str, *statuses: ApprovalStatus) -> ApprovalCard:
        """The task's first card, once it is in one of `statuses`."""

        async def found() -> ApprovalCard | None:
            made = await self.store.dispatch_ledger().cards(task_id)
            if not made:
                return None
            [card] = await self.approvals.listed(self.store.main_session_id, [made[0].card_id])
            return card if card.status in statuses else None

        found_card: ApprovalCard = await until(found)
        return found_card

    async def decide(self, card: ApprovalCard, request_id: str) -> None:
        main = self.store.main_session_id
        await self.approvals.decide(main, card.card_id, card.digest, card.revision, True, request_id)


async def until(probe: Any) -> Any:
    """Poll `probe()` (a coroutine function) until it returns something, within DEADLINE_S."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while (found := await probe()) is None:
        assert loop.time() < end, "the condition did not come within the deadline"
        await asyncio.sleep(0.02)
    return found


async def open_space(
    tmp_path: Path, clock: Clock, *, provider: bool = True, wrap: Any = lambda provider: provider
) -> Space:
    state, files = tmp_path / "state", tmp_path / "files"
    state.mkdir(exist_ok=True)
    files.mkdir(exist_ok=True)
    store = await SqliteSessionDomain.open(state, "local", "personal", clock())
    work: set[asyncio.Task[None]] = set()

    def admit(coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        work.add(task)
        task.add_done_callback(work.discard)

    executor = ActionExecutor(files, session=store.main_session_id)
    grants = TaskGrants(
        store.dispatch_ledger(), wrap(store.native_authorization()) if provider else None, clock
    )
    board = TaskBoard(store.task_ledger(), clock, admit, stopped=lambda outcome: runner.wake())
    approvals = ApprovalService(
        store.approval_ledger(),
        FilesRoot(files),
        WorkerActions(executor),
        Reviewer(StandInModel(), timeout=5),
        clock,
        admit,
        lambda card: runner.card_changed(card),
        grants,
    )
    runner = TaskRunner(
        store.dispatch_ledger(),
        grants,
        store,
        approvals,
        MemoryService(store.memory_ledger(), clock),
        ModelAgent(StandInModel(), task_tools()),
        "stand-in",
        clock,
        admit,
        board.wake,
    )
    await approvals.start()
    await runner.start_up()
    return Space(store, files, executor, approvals, grants, runner, board, clock, work)


async def close_space(space: Space) -> None:
    for task in list(space.work):
        task.cancel()
    await asyncio.gather(*space.work, return_exceptions=True)
    await space.executor.close()
    await space.store.close()


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    opened = await open_space(tmp_path, Clock())
    try:
        yield opened
    finally:
        await close_space(opened)


def task_of(told: str) -> str:
    assert told.startswith("started task "), told
    return told.split()[2]


async def reply(space: Space, task_id: str) -> str:
    """The task's reply, once delivered to the main conversation."""

    async def delivered() -> str | None:
        receipts = await space.board.deliveries(task_id)
        done = [receipt for receipt in receipts if receipt.status.value == "delivered"]
        if not done:
            return None
        [message] = await space.store.history(space.store.main_session_id, done[0].history_seq + 1, 1)
        return message.text

    return await until(delivered)


async def test_a_task_admitted_locally_runs_its_allowed_effect_and_completes(space: Space) -> None:
    task_id = task_of(await space.start("/write notes/later.txt\nbuy milk"))
    [grant] = await space.grants.grants()
    assert (grant.task_id, grant.status.value, grant.authority.kind.value) == (
        task_id,
        "active",
        "local_installation",
    )
    card = await space.card_of(task_id, ApprovalStatus.WAITING)
    assert (card.source.value, card.task_id) == ("task", task_id)
    assert not (space.files / "notes" / "later.txt").exists()  # a grant approves nothing by itself
    await space.decide(card, "decide-1")
    assert await reply(space, task_id) == f"Done: {card.summary} (succeeded)"
    assert (space.files / "notes" / "later.txt").read_text() == "buy milk"
    dispatch = await space.store.dispatch_ledger().dispatch_of(task_id)
    assert dispatch is not None and (dispatch.run_status, dispatch.task.status) == ("succeeded", "completed")


@pytest.mark.parametrize("caller", [Caller("http"), Caller("grpc"), Caller("unix", "phone-1"), None])
async def test_only_the_local_installation_gets_a_native_grant(space: Space, caller: Caller | None) -> None:
    told = await space.start("/write notes/x.txt\nx", caller)
    assert told.startswith("refused (authorization_refused): the native provider issues local-installation")
    assert await space.runner._grants.grants() == []
    assert await space.store.dispatch_ledger().active() == []


async def test_without_a_provider_no_task_starts(tmp_path: Path) -> None:
    opened = await open_space(tmp_path, Clock(), provider=False)
    try:
        told = await opened.start("/write notes/x.txt\nx")
        assert told.startswith("refused (authorization_unavailable): ")
        assert await opened.store.dispatch_ledger().active() == []
    finally:
        await close_space(opened)


async def test_a_retried_call_gets_its_task_and_one_grant(space: Space) -> None:
    first = await space.start("/write notes/x.txt\nx", call_id="call-same")
    again = await space.start("/write notes/x.txt\nx", call_id="call-same")
    assert first == again
    assert len(await space.runner._grants.grants()) == 1


async def test_a_revoked_grant_authorizes_no_effect_and_the_task_fails(space: Space) -> None:
    task_id = task_of(await space.start("/write notes/revoked.txt\nnever"))
    card = await space.card_of(task_id, ApprovalStatus.WAITING)
    [grant] = await space.grants.grants()
    revoked = await space.grants.revoke(grant.grant_id)
    assert revoked is not None and revoked.status.value == "revoked" and revoked.revoked_at is not None
    assert await space.grants.revoke(grant.grant_id) == revoked  # final and idempotent
    await space.decide(card, "decide-revoked")
    ended = await space.card_of(task_id, ApprovalStatus.UNAUTHORIZED)
    assert ended.receipt is None
    assert await reply(space, task_id) == f"Not done: {card.summary} (unauthorized)"
    assert not (space.files / "notes" / "revoked.txt").exists()
    dispatch = await space.store.dispatch_ledger().dispatch_of(task_id)
    assert dispatch is not None and (dispatch.run_status, dispatch.task.status) == ("failed", "failed")


async def test_a_failed_effect_is_no_evidence_of_success(space: Space) -> None:
    task_id = task_of(await space.start("/run false"))
    card = await space.card_of(task_id, ApprovalStatus.WAITING)
    await space.decide(card, "decide-false")
    assert await reply(space, task_id) == f"Failed: {card.summary} (failed)"
    with pytest.raises(TaskStateError) as refused:
        await space.store.dispatch_ledger().complete(task_id, 1, "claimed anyway", space.clock())
    assert refused.value.reason == "no_execution_evidence"


def running(marker: str) -> list[int]:
    """The processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if marker.encode() in cmdline.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


async def test_stopping_a_task_stops_its_running_effect_and_cancels_the_rest(space: Space) -> None:
    marker = "wuu-task-stop-marker"
    task_id = task_of(await space.start(f"/run sh -c 'sleep 30; echo {marker}'"))
    card = await space.card_of(task_id, ApprovalStatus.WAITING)
    await space.decide(card, "decide-sleep")
    await space.card_of(task_id, ApprovalStatus.RUNNING)
    await until(lambda: _some(running(marker)))
    await space.board.stop(task_id)
    stopped = await space.card_of(task_id, ApprovalStatus.UNKNOWN)  # stopped mid-run: never confirmed undone
    assert stopped.receipt is not None and stopped.receipt.outcome.value == "unknown"
    await until(lambda: _some(not running(marker)))
    dispatch = await until(lambda: _final(space, task_id))
    assert (dispatch.run_status, dispatch.task.cancel_requested) == ("failed", True)
    assert await space.board.deliveries(task_id) == []  # a stopped task's reply is never queued


async def _some(value: Any) -> Any:
    return value or None


async def _final(space: Space, task_id: str) -> Any:
    dispatch = await space.store.dispatch_ledger().dispatch_of(task_id)
    return (
        dispatch
        if dispatch is not None and dispatch.run_status in ("succeeded", "failed", "unknown")
        else None
    )


async def test_a_restart_never_replays_an_effect_whose_outcome_is_unknown(tmp_path: Path) -> None:
    clock = Clock()
    first = await open_space(tmp_path, clock)
    task_id = task_of(await first.start("/run sh -c 'echo ran >> ran.log'"))
    card = await first.card_of(task_id, ApprovalStatus.WAITING)
    ledger = first.store.approval_ledger()
    await ledger.move(card.card_id, ApprovalStatus.APPROVED, clock())
    await ledger.move(card.card_id, ApprovalStatus.RUNNING, clock())  # the host dies with the claim written
    await close_space(first)
    second = await open_space(tmp_path, clock)
    try:
        ended = await second.card_of(task_id, ApprovalStatus.UNKNOWN)
        assert ended.receipt is not None and ended.receipt.outcome.value == "unknown"
        assert await reply(second, task_id) == f"Outcome unknown: {card.summary} (unknown)"
        assert not (second.files / "ran.log").exists()
        dispatch = await second.store.dispatch_ledger().dispatch_of(task_id)
        assert dispatch is not None and dispatch.run_status == "unknown"
    finally:
        await close_space(second)


async def test_an_explicit_resume_runs_a_new_attempt_under_a_new_grant(space: Space) -> None:
    task_id = task_of(await space.start("/write notes/resumed.txt\nagain"))
    card = await space.card_of(task_id, ApprovalStatus.WAITING)
    [old] = await space.grants.grants()
    await space.grants.revoke(old.grant_id)
    await space.decide(card, "decide-before-resume")
    assert await reply(space, task_id) == f"Not done: {card.summary} (unauthorized)"
    told = await space.runner.resume(task_id)
    assert task_of(told) == task_id
    new, revoked = await space.grants.grants()
    assert (new.requirements_version, new.status.value, revoked.grant_id) == (2, "active", old.grant_id)

    async def second_card() -> ApprovalCard | None:
        made = await space.store.dispatch_ledger().cards(task_id)
        if not made:
            return None
        [found] = await space.approvals.listed(space.store.main_session_id, [made[0].card_id])
        return found if found.status == ApprovalStatus.WAITING else None

    again = await until(second_card)
    assert again.card_id != card.card_id
    await space.decide(again, "decide-after-resume")
    dispatch = await until(lambda: _final(space, task_id))
    assert (dispatch.run_status, dispatch.task.requirements_version, dispatch.execution_attempt) == (
        "succeeded",
        2,
        2,
    )
    assert (space.files / "notes" / "resumed.txt").read_text() == "again"


class CheckFails:
    """The native provider, whose checks of effects fail: their outcome is unknown."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def acquire(self, effect: Any, now: datetime) -> Any:
        raise ConnectionError("the provider's store is unreachable")


async def test_a_check_whose_outcome_is_unknown_fails_closed(tmp_path: Path) -> None:
    opened = await open_space(tmp_path, Clock(), wrap=CheckFails)
    try:
        task_id = task_of(await opened.start("/write notes/unknown.txt\nx"))
        card = await opened.card_of(task_id, ApprovalStatus.WAITING)
        await opened.decide(card, "decide-unknown-check")
        ended = await opened.card_of(task_id, ApprovalStatus.UNAUTHORIZED)
        assert ended.receipt is None
        assert not (opened.files / "notes" / "unknown.txt").exists()
        history = await opened.store.history(opened.store.main_session_id, None, 50)
        [outcome] = [
            m.text for m in history if m.approval_id == card.card_id and m.text.startswith("Not done")
        ]
        assert outcome.startswith(f"Not done: {card.summary}: not authorized: the grant could not be checked")
    finally:
        await close_space(opened)


async def test_a_task_shares_the_memory_service_with_attribution(space: Space) -> None:
    task_id = task_of(await space.start("/remember the owner takes tea without sugar"))
    told = await reply(space, task_id)
    assert told.startswith("remembered mem_") and told.endswith(
        "(version 1): the owner takes tea without sugar"
    )
    dispatch = await space.store.dispatch_ledger().dispatch_of(task_id)
    assert dispatch is not None
    memory = MemoryService(space.store.memory_ledger(), space.clock)
    listed = await memory.call(
        "memory_query", {"query": "tea"}, Attribution.main_agent(space.store.main_session_id, None)
    )
    assert f"by task {task_id}" in listed, listed


async def test_a_grant_whose_task_was_never_saved_is_revoked_at_start_up(tmp_path: Path) -> None:
    clock = Clock()
    first = await open_space(tmp_path, clock)
    task_id = task_of(await first.start("/write notes/kept.txt\nkept"))
    assert first.grants.provider is not None
    orphan = GrantRequest(
        "task_lost", "ses_task_lost", "task-lost", 1, ("write_file",), ("personal_files",), "stand-in", LOCAL
    )
    lost = await first.grants.provider.issue(orphan, clock())  # the host dies before the task is saved
    await close_space(first)
    second = await open_space(tmp_path, clock)
    try:
        status = {grant.task_id: grant.status.value for grant in await second.grants.grants()}
        assert status == {task_id: "active", lost.task_id: "revoked"}
    finally:
        await close_space(second)
