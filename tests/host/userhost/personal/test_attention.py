"""User attention (`personal.attention`): content-free notifications, grouping off by default, a window that
coalesces one agent's items on its first item's fixed deadline, the policy and the locator checked again at
the deadline, at most 128 batches, the startup buffer, and the owner's close. Time is a manual clock and a
scheduler the test advances: nothing sleeps. The last test runs the real Personal host: a task's delivered
reply raises attention."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.personal.conftest import Space
from wuu.host.userhost.personal.attention import (
    MAX_BATCHES,
    AttentionItem,
    AttentionPolicy,
    AttentionService,
    Locator,
    Notification,
)

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)


@dataclass
class Timer:
    when: datetime
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class ManualTime:
    """A clock and a scheduler: `advance` moves the clock and runs the callbacks that came due, in order."""

    now: datetime = START
    timers: list[Timer] = field(default_factory=list)

    def __call__(self) -> datetime:
        return self.now

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, callback)
        self.timers.append(timer)
        return timer

    def advance(self, delta: timedelta) -> None:
        self.now += delta
        for timer in sorted(self.timers, key=lambda timer: timer.when):
            if timer.when <= self.now and not timer.cancelled:
                timer.cancelled = True
                timer.callback()


@dataclass
class Owner:
    """The service under test, what it raised (one subscriber attached from the start) and its inputs."""

    time: ManualTime
    service: AttentionService
    revoked: set[Locator] = field(default_factory=set)
    raised: list[Notification] = field(default_factory=list)

    async def drain(self) -> list[Notification]:
        """What the subscriber has received so far."""
        await asyncio.sleep(0)  # the subscriber's task takes what is queued
        await asyncio.sleep(0)
        found, self.raised = self.raised, []
        return found


def item(agent: str, seq: int) -> AttentionItem:
    return AttentionItem(agent, Locator("ses_main", seq))


def note(agent: str, count: int, seq: int) -> Notification:
    return Notification(agent, count, Locator("ses_main", seq), 1)


@pytest.fixture
async def owner() -> Owner:
    time = ManualTime()
    revoked: set[Locator] = set()
    service = AttentionService(time, time, lambda locator: locator not in revoked, lambda: 1)
    found = Owner(time, service, revoked)

    async def listen() -> None:
        async for notification in service.subscribe():
            found.raised.append(notification)

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0)
    yield found
    service.close()
    await asyncio.wait_for(listener, DEADLINE)


async def test_grouping_is_off_by_default_each_item_notifies_at_once(owner: Owner) -> None:
    owner.service.admit(item("main", 1))
    owner.service.admit(item("main", 2))
    assert await owner.drain() == [note("main", 1, 1), note("main", 1, 2)]
    assert owner.service.pending == 0


async def test_a_window_coalesces_an_agents_items_on_the_first_items_deadline(owner: Owner) -> None:
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.time.advance(timedelta(minutes=4))
    owner.service.admit(item("main", 2))
    owner.time.advance(timedelta(minutes=5))
    owner.service.admit(item("main", 3))  # later items never move the deadline
    owner.time.advance(timedelta(minutes=1) - timedelta(microseconds=1))
    assert await owner.drain() == []
    owner.time.advance(timedelta(microseconds=1))
    assert await owner.drain() == [note("main", 3, 3)]


async def test_each_agent_has_a_batch_of_its_own(owner: Owner) -> None:
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.time.advance(timedelta(minutes=2))
    owner.service.admit(item("travel", 2))
    owner.service.admit(item("main", 3))
    owner.time.advance(timedelta(minutes=8))
    assert await owner.drain() == [note("main", 2, 3)]
    owner.time.advance(timedelta(minutes=2))
    assert await owner.drain() == [note("travel", 1, 2)]


def test_a_window_over_15_minutes_is_refused() -> None:
    AttentionPolicy(window=timedelta(minutes=15))
    with pytest.raises(ValueError, match="window"):
        AttentionPolicy(window=timedelta(minutes=15, microseconds=1))
    with pytest.raises(ValueError, match="window"):
        AttentionPolicy(window=timedelta(seconds=-1))


async def test_setting_the_window_to_zero_affects_only_new_attention(owner: Owner) -> None:
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.service.set_policy(AttentionPolicy())
    owner.service.admit(item("travel", 2))
    assert await owner.drain() == [note("travel", 1, 2)]  # new: at once
    owner.time.advance(WINDOW - timedelta(microseconds=1))
    assert await owner.drain() == []  # the pending batch keeps its deadline
    owner.time.advance(timedelta(microseconds=1))
    assert await owner.drain() == [note("main", 1, 1)]


async def test_the_policy_is_checked_at_admission_and_again_at_the_deadline(owner: Owner) -> None:
    quiet_from = START + timedelta(minutes=30)
    owner.service.set_policy(AttentionPolicy(quiet=lambda moment: moment >= quiet_from, window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.time.advance(timedelta(minutes=25))
    owner.service.admit(item("main", 2))  # a batch due at minute 35, in quiet hours
    owner.time.advance(timedelta(minutes=10))
    owner.service.admit(item("main", 3))  # quiet hours: dropped
    assert (await owner.drain(), owner.service.suppressed) == ([note("main", 1, 1)], 2)
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    owner.service.admit(item("main", 4))
    owner.service.set_policy(AttentionPolicy(enabled=False))
    owner.time.advance(WINDOW)
    assert (await owner.drain(), owner.service.suppressed) == ([], 3)


async def test_a_batch_whose_latest_locator_is_no_longer_authorized_is_suppressed(owner: Owner) -> None:
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.service.admit(item("main", 2))
    owner.revoked.add(Locator("ses_main", 2))
    owner.service.admit(item("travel", 3))
    owner.service.admit(item("travel", 4))
    owner.revoked.add(Locator("ses_main", 3))  # an earlier item's: the latest decides
    owner.time.advance(WINDOW)
    assert await owner.drain() == [note("travel", 2, 4)]
    assert owner.service.suppressed == 1


async def test_at_most_128_batches_wait_and_a_new_one_beyond_flushes_the_oldest_early(owner: Owner) -> None:
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    for number in range(MAX_BATCHES):
        owner.service.admit(item(f"agent-{number}", number + 1))
    assert (owner.service.pending, await owner.drain()) == (MAX_BATCHES, [])
    owner.service.admit(item("one-more", 1000))
    assert owner.service.pending == MAX_BATCHES
    assert await owner.drain() == [note("agent-0", 1, 1)]


async def test_attention_before_any_subscriber_is_replayed_to_the_first_if_still_authorized() -> None:
    time = ManualTime()
    revoked: set[Locator] = set()
    service = AttentionService(time, time, lambda locator: locator not in revoked, lambda: 1)
    service.admit(item("main", 1))
    service.admit(item("main", 2))
    revoked.add(Locator("ses_main", 1))
    received: list[Notification] = []

    async def listen() -> None:
        async for notification in service.subscribe():
            received.append(notification)

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0)
    service.admit(item("main", 3))
    await asyncio.sleep(0)
    service.close()
    await asyncio.wait_for(listener, DEADLINE)
    assert received == [note("main", 1, 2), note("main", 1, 3)]


async def test_closing_the_owner_drops_pending_batches_and_suppresses_late_attention(owner: Owner) -> None:
    owner.service.set_policy(AttentionPolicy(window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.service.close()
    owner.time.advance(WINDOW)
    owner.service.admit(item("main", 2))
    assert (await owner.drain(), owner.service.pending, owner.service.suppressed) == ([], 0, 1)


async def test_a_delivered_task_reply_raises_attention_on_the_host(space: Space) -> None:
    board, attention = space.plugin.tasks, space.plugin.attention
    assert board is not None and attention is not None
    stream = attention.subscribe()
    first = asyncio.ensure_future(anext(stream))
    task = await board.create("dispatch-1")
    delivery_id = await board.complete(task.task_id, "The report is ready.")
    notification = await asyncio.wait_for(first, DEADLINE)
    receipt = await board.ledger.delivery(delivery_id)
    assert receipt is not None and receipt.history_seq is not None
    assert notification == Notification("main", 1, Locator(space.main, receipt.history_seq), 1)
    await stream.aclose()
