"""User attention (`personal.attention`): content-free notifications, grouping off by default, a window that
coalesces one agent's items on its first item's fixed deadline, the policy and the latest locator checked
again at the deadline, at most 128 batches, subscribers and the startup buffer, and the owner's close.

Time is a manual clock and a `ManualScheduler` the test advances: nothing waits for real time (`settle`
only lets the listening task take what is already queued). The last test runs the real Personal host: a
task's delivered reply raises attention."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.personal.conftest import Space
from wuu.host.userhost.personal.attention import (
    MAX_BATCHES,
    STARTUP_BUFFER,
    SUBSCRIBER_QUEUE,
    AttentionItem,
    AttentionPolicy,
    AttentionService,
    Locator,
    Notification,
    Subscription,
)

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)
TICK = timedelta(microseconds=1)


@dataclass
class ManualClock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Timer:
    when: datetime
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class ManualScheduler:
    """Runs callbacks when the test advances the clock: each due one in deadline order, with the clock
    reading its deadline while it runs."""

    clock: ManualClock
    timers: list[Timer] = field(default_factory=list)

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, callback)
        self.timers.append(timer)
        return timer

    @property
    def live(self) -> int:
        return sum(not timer.cancelled for timer in self.timers)

    def advance(self, delta: timedelta) -> None:
        target = self.clock.now + delta
        while due := [timer for timer in self.timers if not timer.cancelled and timer.when <= target]:
            timer = min(due, key=lambda timer: timer.when)
            self.timers.remove(timer)
            self.clock.now = max(self.clock.now, timer.when)
            timer.callback()
        self.clock.now = target


@dataclass
class Owner:
    """A service on the manual clock, its authorization and generation inputs, and what a listening task
    subscribed from the start has received."""

    clock: ManualClock = field(default_factory=ManualClock)
    revoked: set[Locator] = field(default_factory=set)
    generation: int = 1
    service: AttentionService = field(init=False)
    scheduler: ManualScheduler = field(init=False)
    raised: list[Notification] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scheduler = ManualScheduler(self.clock)
        self.service = AttentionService(
            self.clock, self.scheduler, lambda locator: locator not in self.revoked, lambda: self.generation
        )

    def advance(self, delta: timedelta) -> None:
        self.scheduler.advance(delta)

    async def received(self) -> list[Notification]:
        """What the listener has taken since the last call."""
        await settle()
        found, self.raised = self.raised, []
        return found


async def settle() -> None:
    """Let ready tasks run; no time passes."""
    for _ in range(3):
        await asyncio.sleep(0)


async def collect(subscription: Subscription) -> list[Notification]:
    """Everything a subscription yields until it ends."""
    return [notification async for notification in subscription]


def item(agent: str, seq: int) -> AttentionItem:
    return AttentionItem(agent, Locator("ses_main", seq))


def note(agent: str, count: int, seq: int, generation: int = 1) -> Notification:
    return Notification(agent, count, Locator("ses_main", seq), generation)


@pytest.fixture
async def owner() -> AsyncIterator[Owner]:
    found = Owner()
    subscription = found.service.subscribe()

    async def listen() -> None:
        async for notification in subscription:
            found.raised.append(notification)

    listener = asyncio.create_task(listen())
    yield found
    found.service.close()
    await asyncio.wait_for(listener, DEADLINE)


def windowed(owner: Owner, window: timedelta = WINDOW) -> None:
    owner.service.set_policy(AttentionPolicy(window=window))


# Grouping


async def test_grouping_is_off_by_default_each_item_notifies_at_once(owner: Owner) -> None:
    assert owner.service.policy == AttentionPolicy()
    owner.service.admit(item("main", 1))
    owner.service.admit(item("main", 2))
    assert await owner.received() == [note("main", 1, 1), note("main", 1, 2)]
    assert (owner.service.pending, owner.scheduler.live) == (0, 0)


async def test_a_window_coalesces_an_agents_items_on_the_first_items_fixed_deadline(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.advance(timedelta(minutes=4))
    owner.service.admit(item("main", 2))
    owner.advance(timedelta(minutes=5))
    owner.service.admit(item("main", 3))  # later items never move the deadline
    owner.advance(timedelta(minutes=1) - TICK)
    assert (await owner.received(), owner.service.pending) == ([], 1)
    owner.advance(TICK)
    assert await owner.received() == [note("main", 3, 3)]
    assert (owner.service.pending, owner.scheduler.live) == (0, 0)
    owner.service.admit(item("main", 4))  # the next item opens a new batch, due a window later
    owner.advance(WINDOW - TICK)
    assert await owner.received() == []
    owner.advance(TICK)
    assert await owner.received() == [note("main", 1, 4)]


async def test_each_responsible_agent_has_a_batch_of_its_own(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.advance(timedelta(minutes=2))
    owner.service.admit(item("travel", 2))
    owner.service.admit(item("main", 3))
    assert owner.service.pending == 2
    owner.advance(timedelta(minutes=8))
    assert await owner.received() == [note("main", 2, 3)]
    owner.advance(timedelta(minutes=2))
    assert await owner.received() == [note("travel", 1, 2)]


def test_a_window_over_15_minutes_or_below_zero_is_refused() -> None:
    assert AttentionPolicy(window=timedelta(minutes=15)).window == timedelta(minutes=15)
    with pytest.raises(ValueError, match="window"):
        AttentionPolicy(window=timedelta(minutes=15) + TICK)
    with pytest.raises(ValueError, match="window"):
        AttentionPolicy(window=-TICK)


async def test_setting_the_window_to_zero_affects_only_new_attention(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.service.set_policy(AttentionPolicy())
    owner.service.admit(item("travel", 2))
    owner.service.admit(item("main", 3))  # new attention, even of the pending batch's agent: at once
    assert await owner.received() == [note("travel", 1, 2), note("main", 1, 3)]
    owner.advance(WINDOW - TICK)
    assert await owner.received() == []  # the pending batch is not flushed early
    owner.advance(TICK)
    assert await owner.received() == [note("main", 1, 1)]


async def test_a_changed_window_applies_to_new_batches_only(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    windowed(owner, timedelta(minutes=2))
    owner.advance(timedelta(minutes=1))
    owner.service.admit(item("main", 2))  # joins the pending batch, due at minute 10
    owner.service.admit(item("travel", 3))  # a new batch, due at minute 3
    owner.advance(timedelta(minutes=2))
    assert await owner.received() == [note("travel", 1, 3)]
    owner.advance(timedelta(minutes=7) - TICK)
    assert await owner.received() == []
    owner.advance(TICK)
    assert await owner.received() == [note("main", 2, 2)]


# The policy and the locator, at admission and again at the deadline


async def test_quiet_hours_drop_at_admission_and_suppress_at_the_deadline(owner: Owner) -> None:
    quiet_from = START + timedelta(minutes=30)
    owner.service.set_policy(AttentionPolicy(quiet=lambda moment: moment >= quiet_from, window=WINDOW))
    owner.service.admit(item("main", 1))
    owner.advance(WINDOW)
    assert await owner.received() == [note("main", 1, 1)]
    owner.advance(timedelta(minutes=15))
    owner.service.admit(item("main", 2))  # minute 25: admitted, due at minute 35 in quiet hours
    owner.advance(timedelta(minutes=6))
    owner.service.admit(item("main", 3))  # minute 31, quiet hours: dropped
    assert owner.service.suppressed == 1
    owner.advance(timedelta(minutes=4))
    assert (await owner.received(), owner.service.suppressed, owner.service.pending) == ([], 2, 0)


async def test_a_policy_disabled_by_the_deadline_suppresses_the_batch(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.service.set_policy(AttentionPolicy(enabled=False))
    owner.service.admit(item("main", 2))  # disabled: dropped, the batch keeps its count
    owner.advance(WINDOW)
    assert (await owner.received(), owner.service.suppressed) == ([], 2)


async def test_a_policy_enabled_again_by_the_deadline_lets_the_batch_through(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.service.set_policy(AttentionPolicy(enabled=False))
    owner.advance(WINDOW / 2)
    windowed(owner)
    owner.advance(WINDOW / 2)
    assert (await owner.received(), owner.service.suppressed) == ([note("main", 1, 1)], 0)


async def test_the_batchs_latest_locator_decides_at_the_deadline(owner: Owner) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.service.admit(item("main", 2))
    owner.revoked.add(Locator("ses_main", 2))  # the latest: the batch is suppressed
    owner.service.admit(item("travel", 3))
    owner.service.admit(item("travel", 4))
    owner.revoked.add(Locator("ses_main", 3))  # only an earlier item's: the batch passes
    owner.advance(WINDOW)
    assert await owner.received() == [note("travel", 2, 4)]
    assert owner.service.suppressed == 1


async def test_failing_checks_suppress_attention_without_raising(
    owner: Owner, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_: datetime) -> bool:
        raise RuntimeError("quiet-hours store unavailable")

    owner.service.set_policy(AttentionPolicy(quiet=broken))
    owner.service.admit(item("main", 1))  # the caller (a delivery) is not disturbed
    assert owner.service.suppressed == 1

    def unknown(_: Locator) -> bool:
        raise RuntimeError("authorization unavailable")

    service = AttentionService(
        owner.clock, owner.scheduler, unknown, lambda: 1, AttentionPolicy(window=WINDOW)
    )
    service.admit(item("main", 2))
    with caplog.at_level(logging.ERROR, "wuu.host.userhost"):
        owner.advance(WINDOW)
    assert (service.suppressed, service.pending) == (1, 0)
    assert "suppressed" in caplog.text
    service.close()
    assert await collect(service.subscribe()) == []


# At most 128 batches


async def test_a_batch_beyond_128_flushes_the_one_with_the_nearest_deadline_early(owner: Owner) -> None:
    windowed(owner, timedelta(minutes=15))
    owner.service.admit(item("slow", 1))  # the oldest batch, due at minute 15
    windowed(owner)
    for number in range(1, MAX_BATCHES):
        owner.advance(TICK)
        owner.service.admit(item(f"agent-{number}", number + 1))  # due from minute 10
    assert (owner.service.pending, await owner.received()) == (MAX_BATCHES, [])
    owner.service.admit(item("one-more", 1000))
    assert (owner.service.pending, owner.scheduler.live) == (MAX_BATCHES, MAX_BATCHES)
    assert await owner.received() == [note("agent-1", 1, 2)]
    owner.revoked.add(Locator("ses_main", 3))
    owner.service.admit(item("yet-another", 1001))  # the next nearest is checked like any flush
    assert (await owner.received(), owner.service.suppressed) == ([], 1)
    owner.advance(WINDOW)
    flushed = await owner.received()
    assert [notification.agent_id for notification in flushed[:2]] == ["agent-3", "agent-4"]
    assert note("slow", 1, 1) not in flushed
    owner.advance(timedelta(minutes=5))
    assert await owner.received() == [note("slow", 1, 1)]
    assert (owner.service.pending, owner.scheduler.live) == (0, 0)


# Subscribers and the startup buffer


async def test_every_subscriber_gets_every_notification() -> None:
    owner = Owner()
    first, second = owner.service.subscribe(), owner.service.subscribe()
    owner.service.admit(item("main", 1))
    third = owner.service.subscribe()  # from its call on
    owner.service.admit(item("main", 2))
    owner.service.close()
    assert await collect(first) == await collect(second) == [note("main", 1, 1), note("main", 1, 2)]
    assert await collect(third) == [note("main", 1, 2)]


async def test_a_subscriber_that_does_not_keep_up_loses_its_oldest_notifications() -> None:
    owner = Owner()
    slow = owner.service.subscribe()
    for seq in range(SUBSCRIBER_QUEUE + 2):
        owner.service.admit(item("main", seq))
    owner.service.close()
    kept = await collect(slow)
    assert len(kept) == SUBSCRIBER_QUEUE
    assert (kept[0], kept[-1]) == (note("main", 1, 2), note("main", 1, SUBSCRIBER_QUEUE + 1))


async def test_attention_before_any_subscriber_is_replayed_to_the_first_if_it_still_holds() -> None:
    owner = Owner()
    owner.service.admit(item("main", 1))
    owner.service.admit(item("main", 2))
    owner.service.admit(item("main", 3))
    owner.revoked.add(Locator("ses_main", 2))
    first = owner.service.subscribe()
    second = owner.service.subscribe()  # not the first: no replay
    owner.service.admit(item("main", 4))
    owner.service.close()
    assert await collect(first) == [note("main", 1, 1), note("main", 1, 3), note("main", 1, 4)]
    assert await collect(second) == [note("main", 1, 4)]
    assert owner.service.suppressed == 1


async def test_the_startup_buffer_is_rechecked_for_generation_and_policy() -> None:
    owner = Owner()
    owner.service.admit(item("main", 1))
    owner.generation = 2  # a new composition graph: earlier attention is stale
    owner.service.admit(item("main", 2))
    assert await anext(owner.service.subscribe()) == note("main", 1, 2, generation=2)

    owner = Owner()
    owner.service.admit(item("main", 1))
    owner.service.set_policy(AttentionPolicy(quiet=lambda _: True))
    subscription = owner.service.subscribe()
    owner.service.close()
    assert (await collect(subscription), owner.service.suppressed) == ([], 1)


async def test_the_startup_buffer_keeps_the_latest_128_and_refills_once_nobody_listens() -> None:
    owner = Owner()
    for seq in range(STARTUP_BUFFER + 3):
        owner.service.admit(item("main", seq))
    first = owner.service.subscribe()
    await first.aclose()  # detached: attention is buffered again
    owner.service.admit(item("main", 999))
    later = owner.service.subscribe()
    owner.service.close()
    replayed = await collect(first)
    assert replayed == []  # what it had not taken went with it
    assert await collect(later) == [note("main", 1, 999)]

    owner = Owner()
    for seq in range(STARTUP_BUFFER + 3):
        owner.service.admit(item("main", seq))
    subscription = owner.service.subscribe()
    owner.service.close()
    kept = await collect(subscription)
    assert [notification.latest.message_seq for notification in kept] == list(range(3, STARTUP_BUFFER + 3))


async def test_a_coalesced_batch_raised_while_nobody_listens_is_replayed_once_more_checked() -> None:
    owner = Owner()
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.service.admit(item("main", 2))
    owner.advance(WINDOW)
    owner.service.admit(item("travel", 3))
    owner.advance(WINDOW)
    owner.revoked.add(Locator("ses_main", 3))
    subscription = owner.service.subscribe()
    owner.service.close()
    assert await collect(subscription) == [note("main", 2, 2)]


# The owner's close


async def test_closing_the_owner_drops_pending_and_buffered_attention_and_ends_iterations(
    owner: Owner,
) -> None:
    windowed(owner)
    owner.service.admit(item("main", 1))
    owner.service.set_policy(AttentionPolicy())
    owner.service.admit(item("travel", 2))
    owner.service.close()
    assert owner.scheduler.live == 0
    owner.advance(WINDOW)
    owner.service.admit(item("main", 3))  # late attention
    assert (await owner.received(), owner.service.pending, owner.service.suppressed) == (
        [note("travel", 1, 2)],  # raised before the close: the subscriber still takes it
        0,
        1,
    )
    assert await collect(owner.service.subscribe()) == []  # a subscriber after close ends at once


async def test_closing_the_owner_loses_what_nobody_received() -> None:
    owner = Owner()
    owner.service.admit(item("main", 1))
    owner.service.close()
    assert await collect(owner.service.subscribe()) == []


# On the host


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
