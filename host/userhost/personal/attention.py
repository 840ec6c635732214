"""User attention: the content-free notifications the host raises for the owner (`session.attention`; the limits are
`max_attention_batches` and `max_attention_grouping_window_seconds` of spec/methods/userhost.json),
observed for the host's whole life through `AttentionService.subscribe`, whether or not a phone is attached.

The persisted owner admits attention under its current policy (notifications on, not quiet hours); raw
terminal events are not attention. Grouping is off by default: each admitted item notifies at once. With a
window (at most 15 minutes) the items of one responsible agent coalesce into one batch whose deadline the
batch's first item fixes; later items never move it, and a later change of the window (even to zero) leaves
it alone. At the deadline the current policy and the batch's latest locator are checked again, and the batch
is suppressed if either no longer allows it. A notification carries no content: the agent, how many items it
stands for, a locator of the latest, and the graph generation it was raised in; a phone provider turns it into
one generic agent notification, not a per-item digest. Conversation results themselves stay individual and
readable at once: attention only tells the owner to look.

This is best-effort transport, not a durable delivery receipt: at most 128 batches wait in memory, a bounded
buffer keeps what was raised while nobody listened, and closing the service (shutdown) loses both.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from wuu.generated.catalog import (
    USERHOST_MAX_ATTENTION_BATCHES,
    USERHOST_MAX_ATTENTION_GROUPING_WINDOW_SECONDS,
)

log = logging.getLogger("wuu.host.userhost")

MAX_WINDOW = timedelta(seconds=USERHOST_MAX_ATTENTION_GROUPING_WINDOW_SECONDS)
"""The longest grouping window (15 minutes)."""
MAX_BATCHES = USERHOST_MAX_ATTENTION_BATCHES
"""Batches kept in memory at once (128). A new agent's batch beyond them flushes
the pending batch with the nearest deadline early (checked like any flush) rather than lose attention."""
STARTUP_BUFFER = 128
"""Notifications kept while no subscriber is attached; beyond it the oldest are dropped."""
SUBSCRIBER_QUEUE = 256
"""Notifications queued for one subscriber that does not keep up; beyond it the oldest are dropped."""


@dataclass(frozen=True)
class Locator:
    """Where an attention item points: a saved message of a session, never its content."""

    session_id: str
    message_seq: int


@dataclass(frozen=True)
class AttentionItem:
    """One admitted item: its responsible agent and its locator, no content."""

    agent_id: str
    locator: Locator


@dataclass(frozen=True)
class AttentionPolicy:
    """The owner's notification policy: on or off, quiet hours, and the grouping window.

    `window` is 0 (no grouping, the default) up to 15 minutes; anything else is a `ValueError` naming it."""

    enabled: bool = True
    quiet: Callable[[datetime], bool] | None = None
    """Whether a moment falls in quiet hours, when attention is suppressed."""
    window: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if not timedelta(0) <= self.window <= MAX_WINDOW:
            raise ValueError(f"window: {self.window} is not between 0 and {MAX_WINDOW}")

    def allows(self, moment: datetime) -> bool:
        """Whether attention may be raised at `moment`: notifications on and not quiet hours."""
        return self.enabled and not (self.quiet is not None and self.quiet(moment))


@dataclass(frozen=True)
class Notification:
    """One generic agent notification: no message content, no per-item digest."""

    agent_id: str
    count: int
    """How many admitted items it stands for."""
    latest: Locator
    """The latest item's locator: where a client opens the conversation."""
    generation: int
    """The composition graph generation it was raised in."""


class Cancellable(Protocol):
    """A scheduled callback that can still be called off."""

    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Runs a callback at a moment of the service's clock."""

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Cancellable: ...


class LoopScheduler:
    """The running event loop as a scheduler: the delay to `when` is measured once, on `clock`, when the
    callback is scheduled."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Cancellable:
        delay = max(0.0, (when - self._clock()).total_seconds())
        return asyncio.get_running_loop().call_later(delay, callback)


class Subscription(AsyncIterator[Notification]):
    """One observer's notifications, in the order raised, from its `subscribe` call until the service closes
    (what was already queued is still yielded, then the iteration ends) or until `aclose`."""

    def __init__(self, detach: Callable[[Subscription], None]) -> None:
        self._detach = detach
        self._queue: deque[Notification] = deque(maxlen=SUBSCRIBER_QUEUE)
        self._wakeup = asyncio.Event()
        self._ended = False

    def _put(self, notification: Notification) -> None:
        self._queue.append(notification)  # a full queue drops its oldest
        self._wakeup.set()

    def _end(self) -> None:
        self._ended = True
        self._wakeup.set()

    async def __anext__(self) -> Notification:
        while not self._queue:
            if self._ended:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._queue.popleft()

    async def aclose(self) -> None:
        """Stop observing: what is queued is discarded and the iteration ends."""
        self._detach(self)
        self._queue.clear()
        self._end()


@dataclass
class _Batch:
    agent_id: str
    deadline: datetime
    count: int
    latest: Locator
    timer: Cancellable | None = None


class AttentionService:
    """The host's attention owner for one space, for the host's whole life.

    `clock` reads the current moment; `scheduler` runs each batch's flush at its deadline; `authorized`
    answers whether a locator is still the owner's to notify about (ownership and resource authorization),
    and `generation` the current composition graph generation. Both are asked again at every flush and
    replay; if `authorized` or the policy's `quiet` fails, the attention is suppressed (fail closed)."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        scheduler: Scheduler,
        authorized: Callable[[Locator], bool],
        generation: Callable[[], int],
        policy: AttentionPolicy | None = None,
    ) -> None:
        self._policy = policy or AttentionPolicy()
        self._clock = clock
        self._scheduler = scheduler
        self._authorized = authorized
        self._generation = generation
        self._batches: dict[str, _Batch] = {}
        self._buffer: deque[Notification] = deque(maxlen=STARTUP_BUFFER)
        self._subscribers: list[Subscription] = []
        self._suppressed = 0
        self._closed = False

    @property
    def policy(self) -> AttentionPolicy:
        """The current policy."""
        return self._policy

    def set_policy(self, policy: AttentionPolicy) -> None:
        """Change the policy. Enabling, disabling and quiet hours apply at once, to admissions and to every
        later flush and replay; a new window applies only to batches opened from now on: pending batches keep
        their deadline (setting the window to zero does not flush them early)."""
        self._policy = policy

    @property
    def pending(self) -> int:
        """How many batches wait for their deadline."""
        return len(self._batches)

    @property
    def suppressed(self) -> int:
        """Items dropped at admission, and batches and buffered notifications dropped at their flush or
        replay, because the owner was closed, the policy did not allow them or their locator was no longer
        authorized."""
        return self._suppressed

    def admit(self, item: AttentionItem) -> None:
        """Admit one item under the current policy. A closed owner, a disabled policy or quiet hours drop it;
        with no window it notifies at once; otherwise it joins its agent's pending batch, or opens one due
        `window` from now."""
        now = self._clock()
        if self._closed or not self._allows(now):
            self._suppressed += 1
            return
        if not self._policy.window:
            self._raise(Notification(item.agent_id, 1, item.locator, self._generation()))
            return
        batch = self._batches.get(item.agent_id)
        if batch is None:
            if len(self._batches) >= MAX_BATCHES:
                self._flush(min(self._batches.values(), key=lambda pending: pending.deadline))
            batch = _Batch(item.agent_id, now + self._policy.window, 0, item.locator)
            self._batches[item.agent_id] = batch
            opened = batch
            batch.timer = self._scheduler.call_at(batch.deadline, lambda: self._flush(opened))
        batch.count += 1
        batch.latest = item.locator

    def subscribe(self) -> Subscription:
        """Observe the notifications raised from now until the service closes; every subscriber gets each
        one. A subscriber that attaches while none is attached first gets the buffered notifications raised
        meanwhile that still hold now: same generation, policy allowing, latest locator authorized. After
        `close` the iteration ends at once."""
        subscription = Subscription(self._detach)
        if self._closed:
            subscription._end()
            return subscription
        if not self._subscribers:
            now = self._clock()
            for kept in self._buffer:
                if kept.generation == self._generation() and self._allows(now) and self._still(kept.latest):
                    subscription._put(kept)
                else:
                    self._suppressed += 1
            self._buffer.clear()
        self._subscribers.append(subscription)
        return subscription

    def close(self) -> None:
        """The owner closes (shutdown, or the owner disabled): pending batches and the startup buffer are
        dropped, subscribers' iterations end once they have taken what was queued, and later attention is
        suppressed."""
        self._closed = True
        for batch in self._batches.values():
            if batch.timer is not None:
                batch.timer.cancel()
        self._batches.clear()
        self._buffer.clear()
        for subscription in self._subscribers:
            subscription._end()
        self._subscribers.clear()

    def _flush(self, batch: _Batch) -> None:
        if self._batches.get(batch.agent_id) is not batch:
            return  # already flushed early, or dropped by close
        del self._batches[batch.agent_id]
        if batch.timer is not None:
            batch.timer.cancel()
        if self._allows(self._clock()) and self._still(batch.latest):
            self._raise(Notification(batch.agent_id, batch.count, batch.latest, self._generation()))
        else:
            self._suppressed += 1

    def _raise(self, notification: Notification) -> None:
        if not self._subscribers:
            self._buffer.append(notification)  # a full buffer drops its oldest
        for subscription in self._subscribers:
            subscription._put(notification)

    def _detach(self, subscription: Subscription) -> None:
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)

    def _allows(self, moment: datetime) -> bool:
        try:
            return self._policy.allows(moment)
        except Exception:
            log.exception("the attention quiet-hours check failed; attention suppressed")
            return False

    def _still(self, locator: Locator) -> bool:
        try:
            return self._authorized(locator)
        except Exception:
            log.exception("the attention authorization check failed; attention suppressed")
            return False
