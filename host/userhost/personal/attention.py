"""User attention: the content-free notifications the host raises for the owner (seed 003, "session.attention"),
observed for the host's whole life through `AttentionService.subscribe`, whether or not a phone is attached.

Attention is admitted under the owner's current policy (notifications on, not quiet hours). Grouping is off
by default: each admitted item notifies at once. With a window (at most 15 minutes) the items of one
responsible agent coalesce into one batch whose deadline the batch's first item fixes; later items never
move it. At the deadline the policy and the batch's latest locator are checked again, and the batch is
suppressed if either no longer allows it. This is best-effort transport, not a durable receipt: at most 128
batches wait in memory, and closing the service loses them. A notification carries no content: the agent,
how many items it stands for, and a locator of the latest.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

MAX_WINDOW = timedelta(minutes=15)
MAX_BATCHES = 128
"""Batches kept in memory at once; admitting a new agent's batch beyond them flushes the oldest early."""
STARTUP_BUFFER = 128
"""Notifications kept for the first subscriber while none is attached (the oldest are dropped beyond)."""
SUBSCRIBER_QUEUE = 256
"""Notifications queued for one subscriber that does not keep up (the oldest are dropped beyond)."""


@dataclass(frozen=True)
class Locator:
    """Where the latest attention item points: a message of a session."""

    session_id: str
    message_seq: int


@dataclass(frozen=True)
class AttentionItem:
    """One admitted item: its responsible agent and its locator, no content."""

    agent_id: str
    locator: Locator


@dataclass(frozen=True)
class AttentionPolicy:
    """The owner's notification policy: on or off, quiet hours, and the grouping window (0: no grouping)."""

    enabled: bool = True
    quiet: Callable[[datetime], bool] | None = None
    """Whether a moment falls in quiet hours, when attention is not raised."""
    window: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if not timedelta(0) <= self.window <= MAX_WINDOW:
            raise ValueError(f"window: {self.window} is not between 0 and {MAX_WINDOW}")

    def allows(self, moment: datetime) -> bool:
        """Whether attention may be raised at `moment`."""
        return self.enabled and not (self.quiet is not None and self.quiet(moment))


@dataclass(frozen=True)
class Notification:
    """One generic agent notification: no message content, no per-item digest."""

    agent_id: str
    count: int
    """How many admitted items it stands for."""
    latest: Locator
    generation: int
    """The composition graph generation it was raised in."""


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Runs a callback at a moment of the service's clock."""

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Cancellable: ...


class LoopScheduler:
    """The running event loop as a scheduler, measuring delays on `clock`."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Cancellable:
        delay = max(0.0, (when - self._clock()).total_seconds())
        return asyncio.get_running_loop().call_later(delay, callback)


@dataclass
class _Batch:
    deadline: datetime
    count: int
    latest: Locator
    timer: Cancellable | None = None


class AttentionService:
    """The host's attention owner for one space."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        scheduler: Scheduler,
        authorized: Callable[[Locator], bool],
        generation: Callable[[], int],
        policy: AttentionPolicy | None = None,
    ) -> None:
        self.policy = policy or AttentionPolicy()
        self.suppressed = 0
        """Items and batches dropped by the policy, an unauthorized locator, or the closed owner."""
        self._clock = clock
        self._scheduler = scheduler
        self._authorized = authorized
        self._generation = generation
        self._batches: dict[str, _Batch] = {}
        self._buffer: deque[Notification] = deque(maxlen=STARTUP_BUFFER)
        self._subscribers: list[deque[Notification | None]] = []
        self._wakeups: list[asyncio.Event] = []
        self._closed = False

    def set_policy(self, policy: AttentionPolicy) -> None:
        """Change the policy. A new window applies to batches opened from now on; pending batches keep their
        deadline (setting it to zero does not flush them early)."""
        self.policy = policy

    def admit(self, item: AttentionItem) -> None:
        """Admit one item under the current policy: notify at once, or join its agent's batch."""
        now = self._clock()
        if self._closed or not self.policy.allows(now):
            self.suppressed += 1
            return
        if not self.policy.window:
            self._raise(Notification(item.agent_id, 1, item.locator, self._generation()))
            return
        batch = self._batches.get(item.agent_id)
        if batch is None:
            if len(self._batches) >= MAX_BATCHES:
                self._flush(next(iter(self._batches)))  # the oldest batch goes early rather than be lost
            batch = _Batch(now + self.policy.window, 0, item.locator)
            self._batches[item.agent_id] = batch
            batch.timer = self._scheduler.call_at(batch.deadline, lambda: self._flush(item.agent_id))
        batch.count += 1
        batch.latest = item.locator

    @property
    def pending(self) -> int:
        """How many batches wait for their deadline."""
        return len(self._batches)

    def _flush(self, agent_id: str) -> None:
        batch = self._batches.pop(agent_id, None)
        if batch is None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
        if self.policy.allows(self._clock()) and self._authorized(batch.latest):
            self._raise(Notification(agent_id, batch.count, batch.latest, self._generation()))
        else:
            self.suppressed += 1

    def _raise(self, notification: Notification) -> None:
        if not self._subscribers:
            self._buffer.append(notification)
            return
        for queue, wakeup in zip(self._subscribers, self._wakeups, strict=True):
            if len(queue) >= SUBSCRIBER_QUEUE:
                queue.popleft()
            queue.append(notification)
            wakeup.set()

    async def subscribe(self) -> AsyncIterator[Notification]:
        """The notifications from now until the service closes. The first subscriber also gets those raised
        while nobody listened, each checked again first (still authorized, same generation, policy on)."""
        queue: deque[Notification | None] = deque()
        wakeup = asyncio.Event()
        if not self._subscribers:
            now = self._clock()
            for kept in self._buffer:
                current = kept.generation == self._generation() and self.policy.allows(now)
                if current and self._authorized(kept.latest):
                    queue.append(kept)
            self._buffer.clear()
        if self._closed:
            queue.append(None)
        self._subscribers.append(queue)
        self._wakeups.append(wakeup)
        try:
            while True:
                while queue:
                    notification = queue.popleft()
                    if notification is None:
                        return
                    yield notification
                wakeup.clear()
                await wakeup.wait()
        finally:
            index = self._subscribers.index(queue)
            del self._subscribers[index], self._wakeups[index]

    def close(self) -> None:
        """The owner closes: pending batches are dropped, subscribers' iterators end, later attention is
        suppressed."""
        self._closed = True
        for batch in self._batches.values():
            if batch.timer is not None:
                batch.timer.cancel()
        self._batches.clear()
        for queue, wakeup in zip(self._subscribers, self._wakeups, strict=True):
            queue.append(None)
            wakeup.set()
