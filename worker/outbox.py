"""The ordered output of one connection: whole frames, written in order, each released once written.

A frame is written at once when nothing is queued and the transport has nothing buffered; otherwise it
waits in a queue that one writer task writes, draining the transport between frames. An optional bound
on the queued bytes turns a peer that stops reading into a failed output (it is disconnected, never
waited for), so one slow peer cannot hold memory or delay anyone else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .framing import OutputClosed

log = logging.getLogger("wuu.worker.outbox")


class Outbox:
    """Writes the frames of one connection to its stream, in order.

    `closed` is set when the output fails (the peer went away, or the bound was exceeded); `error` says
    why. `sent` is called with every frame accepted for writing (a transcript's hook).
    """

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        *,
        remote: str,
        closed: asyncio.Event | None = None,
        max_queued_bytes: int | None = None,
        sent: Callable[[bytes], None] | None = None,
    ) -> None:
        """`closed`, when given, may also be set from outside once the output is known to be gone."""
        self.closed = closed or asyncio.Event()
        self.error = ""
        self._writer = writer
        # The fast path calls the transport itself: on a small reply, each call saved shows.
        self._transport = writer.transport
        self._remote = remote
        self._max = max_queued_bytes
        self._sent = sent
        self._queue: asyncio.Queue[tuple[bytes, asyncio.Future[None] | None] | None] = asyncio.Queue()
        self._queued_bytes = 0
        # True while the writer task has nothing queued: a frame can then be written without it.
        self._idle = True
        self._task = asyncio.create_task(self._write_loop())

    @property
    def reason(self) -> str:
        """Why the output failed, for messages."""
        return f"writing to {self._remote} failed{self.error}"

    def put(self, data: bytes, written: asyncio.Future[None] | None = None) -> None:
        """Write `data` after everything put before it; `written`, if given, is resolved once it is
        written (or fails with OutputClosed). Dropped when the output has failed."""
        if self.closed.is_set():
            if written is not None:
                written.set_exception(OutputClosed(self.reason))
            return
        if self._sent is not None:
            self._sent(data)
        if (
            written is None
            and self._idle
            and not self._transport.is_closing()
            and self._transport.get_write_buffer_size() == 0
        ):
            # Such hops through the writer task are most of a small request's round trip.
            try:
                self._transport.write(data)
            except (ConnectionError, RuntimeError) as error:
                self.fail(str(error))
            return
        if self._max is not None and self._queued_bytes + len(data) > self._max:
            self.fail(f"{self._remote} does not read its frames ({self._queued_bytes} bytes wait)")
            self._transport.abort()
            if written is not None:
                written.set_exception(OutputClosed(self.reason))
            return
        self._idle = False
        self._queued_bytes += len(data)
        self._queue.put_nowait((data, written))

    async def put_and_wait(self, data: bytes) -> None:
        """Write `data` and wait until it is written; OutputClosed if the output fails first."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.put(data, written)
        await written

    def fail(self, why: str) -> None:
        """Mark the output failed (once); nothing more is written."""
        if not self.closed.is_set():
            self.error = f": {why}"
            log.warning("%s", self.reason)
            self.closed.set()

    async def _write_loop(self) -> None:
        while True:
            if self._queue.empty():
                self._idle = True
            item = await self._queue.get()
            if item is None:
                break
            data, written = item
            del item
            try:
                if self.closed.is_set() or self._writer.is_closing():
                    raise OutputClosed("the output is closed")
                self._writer.write(data)
                await self._writer.drain()
            except (OutputClosed, ConnectionError, RuntimeError) as error:
                self.fail(str(error))
                if written is not None and not written.done():
                    written.set_exception(OutputClosed(self.reason))
            else:
                if written is not None and not written.done():
                    written.set_result(None)
            self._queued_bytes -= len(data)
            del data  # a written frame (up to the frame limit) must not live on until the next one arrives
        self._writer.close()

    def end(self) -> None:
        """Close the output once everything queued is written (the peer then sees EOF)."""
        self._idle = False
        self._queue.put_nowait(None)

    async def wait_closed(self) -> None:
        """Wait until `end` has written everything queued and closed the output."""
        await asyncio.wait({self._task})

    def abort(self) -> None:
        """Close the output now, dropping whatever is still queued."""
        self._task.cancel()
        self._writer.close()
