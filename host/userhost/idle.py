"""The idle timer of a client transport that has no connection of its own to hold it (an HTTP token, a gRPC
connection): it ends the transport once it has had nothing in flight for a while, freeing its slot among
the host's client transports (spec/schema/userhost/envelope.schema.json)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

DEFAULT_IDLE_SECONDS = 60.0
"""How long a transport lives with no call in flight and no notification stream open."""


class IdleTimer:
    """Calls `expire` once the transport has been idle for `seconds`: no `active` call and no `hold`."""

    def __init__(self, seconds: float, expire: Callable[[], None]) -> None:
        self.seconds = seconds
        self._expire = expire
        self._active = 0
        self._handle: asyncio.TimerHandle | None = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The transport is busy while the block runs; its idle time counts from the block's end."""
        self.hold()
        try:
            yield
        finally:
            self.release()

    def hold(self) -> None:
        """Something keeps the transport busy (an open notification stream) until `release`."""
        self._active += 1
        self._cancel()

    def release(self) -> None:
        """What `hold` took has ended."""
        self._active -= 1
        self.restart()

    def restart(self) -> None:
        """Start counting idle time from now, unless the transport is busy."""
        self._cancel()
        if self._active == 0:
            self._handle = asyncio.get_running_loop().call_later(self.seconds, self._expire)

    def stop(self) -> None:
        """The transport has ended: no expiry is pending (`expire` must also bear being called late)."""
        self._cancel()

    def _cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
