"""The accept loop of the user host's stream listeners (the Unix socket and HTTP), and the bound on the
connections a listener holds before they have shown their right to be served.

A listener accepts with its own loop rather than asyncio's `create_server`, for two reasons:
- out of descriptors (EMFILE), asyncio's accept callback logs a traceback for every connection waiting in
  the backlog and reschedules itself as many times, thousands of times a second; this loop sheds the oldest
  pending connection to free a descriptor, backs off while none frees up, and logs two lines per shortage:
  when it begins, and once it has been over for `QUIET_SECONDS`, with what it cost;
- every accepted connection is *pending* until the transport admits it (a valid token on HTTP, a completed
  `initialize` on the socket). At most `max_pending` are held: a new one ends the oldest, so connections
  that never speak cannot keep an authenticated client from connecting, and each is also bounded in time by
  its transport's deadline.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("wuu.host.userhost")

DEFAULT_MAX_PENDING = 64
"""The default bound on a listener's pending connections."""
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
FIRST_BACKOFF_SECONDS = 0.01
MAX_BACKOFF_SECONDS = 1.0
QUIET_SECONDS = 1.0
"""How long accepting must go without a shortage for the shortage to count as over."""


Connection = asyncio.BaseTransport | asyncio.Task[None]
"""A pending connection: its transport, or the task that is still opening it (a TLS handshake)."""


class Pending:
    """The pending connections of one listener, oldest first."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the bound on pending connections must be at least 1, not {limit}")
        self.limit = limit
        self._held: OrderedDict[Connection, None] = OrderedDict()

    def add(self, connection: Connection) -> None:
        """Hold a new connection as pending, ending the oldest one when the bound is reached."""
        self._forget_ended()
        while len(self._held) >= self.limit:
            self.shed()
        self._held[connection] = None

    def admit(self, connection: Connection | None) -> None:
        """The connection has shown its right to be served (or is no longer opening): not pending now."""
        if connection is not None:
            self._held.pop(connection, None)

    def shed(self) -> bool:
        """End the oldest pending connection; whether there was one."""
        self._forget_ended()
        if not self._held:
            return False
        oldest, _ = self._held.popitem(last=False)
        if isinstance(oldest, asyncio.Task):
            oldest.cancel()
        else:
            oldest.abort()  # type: ignore[attr-defined]
        return True

    def __len__(self) -> int:
        self._forget_ended()
        return len(self._held)

    def _forget_ended(self) -> None:
        for ended in [held for held in self._held if _ended(held)]:
            del self._held[ended]


def _ended(connection: Connection) -> bool:
    return connection.done() if isinstance(connection, asyncio.Task) else connection.is_closing()


class AcceptLoop:
    """Accepts connections on a listening socket and hands each to `serve` (in a task of its own)."""

    def __init__(
        self,
        listening: socket.socket,
        serve: Callable[[socket.socket], Coroutine[Any, Any, None]],
        pending: Pending,
        name: str,
    ) -> None:
        listening.setblocking(False)
        self._listening = listening
        self._serve = serve
        self._pending = pending
        self._name = name
        # Not a TaskGroup under the accept task: connections outlive `close`, their server ends them in its
        # own order (gracefully on the socket), and a failed connection is logged without ending the others.
        self._connections: set[asyncio.Task[None]] = set()
        self._failed = self._shed = 0
        self._quiet: asyncio.TimerHandle | None = None
        self._seen_errors: set[int | None] = set()
        self._task = asyncio.create_task(self._accept())
        self._task.add_done_callback(self._stopped)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = FIRST_BACKOFF_SECONDS
        while True:
            try:
                connection, _ = await loop.sock_accept(self._listening)
            except OSError as error:
                if error.errno in OUT_OF_RESOURCES:
                    self._short_of(error)
                    if self._pending.shed():
                        self._shed += 1
                    else:
                        backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                else:
                    # A connection that failed before it was accepted (ECONNABORTED, EPROTO, a network
                    # error): accept(2) says to treat it as EAGAIN. Logged once per kind.
                    self._failed_once(error)
                await asyncio.sleep(backoff)
                continue
            backoff = FIRST_BACKOFF_SECONDS
            task = asyncio.create_task(self._serve(connection))
            self._connections.add(task)
            task.add_done_callback(self._finished)

    def _short_of(self, error: OSError) -> None:
        """An accept failed for want of resources: the first of a shortage is logged, and the shortage's end
        is put off until accepting has gone QUIET_SECONDS without another."""
        if self._quiet is None:
            log.warning(
                "cannot accept connections (%s): shedding pending connections and backing off",
                error.strerror,
                extra={"transport": self._name},
            )
        else:
            self._quiet.cancel()
        self._failed += 1
        self._quiet = asyncio.get_running_loop().call_later(QUIET_SECONDS, self._shortage_over)

    def _shortage_over(self) -> None:
        log.warning(
            "accepting connections again",
            extra={"transport": self._name, "failed_accepts": self._failed, "shed_connections": self._shed},
        )
        self._failed = self._shed = 0
        self._quiet = None

    def _failed_once(self, error: OSError) -> None:
        if error.errno not in self._seen_errors:
            self._seen_errors.add(error.errno)
            log.warning("an accept failed: %s; accepting goes on", error, extra={"transport": self._name})

    def _stopped(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the accept loop failed", exc_info=task.exception(), extra={"transport": self._name})

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._connections.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a connection failed", exc_info=task.exception(), extra={"transport": self._name})

    async def close(self) -> None:
        """Stop accepting and close the listening socket (connections already served go on)."""
        self._task.cancel()
        try:
            await asyncio.wait({self._task})
        finally:
            if self._quiet is not None:
                self._quiet.cancel()
            self._listening.close()

    async def cancel_connections(self) -> None:
        """Cancel the tasks still serving accepted connections, and wait for them."""
        for task in self._connections:
            task.cancel()
        await self.wait_connections()

    async def wait_connections(self) -> None:
        """Wait until every connection's task has ended."""
        while self._connections:
            await asyncio.wait(set(self._connections))
