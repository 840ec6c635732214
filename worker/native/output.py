"""The retained output of one process: the tail of its combined stdout+stderr stream, addressed by offset.

Offsets count from the first byte the process ever wrote. The buffer keeps exactly the last `retain_bytes`
of the stream readable (the *retained start* is `max(0, total - retain_bytes)`); older bytes are gone and
a read below the retained start answers from it, flagged truncated (`process/read` semantics, with
`retain_bytes` the process's `output_retention_bytes`). The retention is a bound, not an allocation: the
buffer holds the bytes written so far, at most `retain_bytes` plus one stored chunk.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right

# Small writes coalesce into an open chunk of up to this size, so a process that writes a byte at a time
# costs one list entry per 64 KiB rather than one per write; larger pipe reads are stored as they come.
_SEAL_BYTES = 64 * 1024

# Dropped chunks are compacted out of the lists once this many have accumulated (and they are at least
# half of the lists), which keeps dropping amortised O(1) per chunk.
_COMPACT_AFTER = 256


class OutputBuffer:
    """The retained tail of one combined output stream, with a total byte count and waiting for new bytes.

    Appending is O(length of the appended bytes); reading copies only the bytes it returns. All methods
    run on the event loop's thread.
    """

    def __init__(self, retain_bytes: int) -> None:
        if retain_bytes < 1:
            raise ValueError("retain_bytes must be positive")
        self._retain = retain_bytes
        # Sealed chunks, oldest first, and the stream offset of each; entries before `_head` are dropped.
        self._chunks: list[bytes] = []
        self._starts: list[int] = []
        self._head = 0
        # The open chunk that small appends coalesce into; it starts at stream offset `_tail_start`.
        self._tail = bytearray()
        self._tail_start = 0
        self._total = 0
        self._read_mark = 0
        self._closed = False
        # Resolved (and forgotten) on the next append or close; created only while someone waits.
        self._changed: asyncio.Future[None] | None = None

    @property
    def total_bytes(self) -> int:
        """Every byte ever appended (the stream's `TotalBytes`)."""
        return self._total

    @property
    def retain_bytes(self) -> int:
        """How many of the stream's last bytes stay readable."""
        return self._retain

    @property
    def retained_start(self) -> int:
        """The offset of the oldest byte still readable."""
        return max(0, self._total - self._retain)

    @property
    def unread_bytes(self) -> int:
        """The bytes past the furthest end a read has returned (`note_read`)."""
        return self._total - self._read_mark

    def note_read(self, end: int) -> None:
        """Record that a read returned the stream up to offset `end`."""
        self._read_mark = max(self._read_mark, end)

    @property
    def closed(self) -> bool:
        """True once the stream has ended: no byte will be appended any more."""
        return self._closed

    def append(self, data: bytes) -> None:
        """Add bytes at the end of the stream."""
        if self._closed:
            raise ValueError("append to a closed output stream")
        if not data:
            return
        if not self._tail and len(data) >= _SEAL_BYTES:
            # A large chunk is kept as it is: no copy.
            start = self._total
            self._total += len(data)
            self._seal(bytes(data), start)
            self._tail_start = self._total
        else:
            self._tail += data
            self._total += len(data)
            if len(self._tail) >= _SEAL_BYTES:
                self._seal(bytes(self._tail), self._tail_start)
                self._tail.clear()
                self._tail_start = self._total
        self._wake()

    def close(self) -> None:
        """Mark the end of the stream and wake every waiter."""
        self._closed = True
        self._wake()

    def read(self, offset: int, max_bytes: int) -> tuple[int, bytes, bool]:
        """Read up to `max_bytes` from stream offset `offset`: `(start_offset, data, truncated)`.

        Below the retained start the read starts there instead, with `truncated` true. At or past the
        end of the stream it returns no bytes, positioned at `offset`.
        """
        if offset < 0 or max_bytes < 0:
            raise ValueError("offset and max_bytes must not be negative")
        retained = self.retained_start
        truncated = offset < retained
        start = max(offset, retained)
        end = min(self._total, start + max_bytes)
        if start >= end:
            return start, b"", truncated
        return start, self._slice(start, end), truncated

    async def wait_total(self, minimum: int, timeout: float | None) -> bool:
        """Wait until the stream holds at least `minimum` bytes in total or has ended.

        Returns whether that is so; False means `timeout` seconds (None: no limit) passed first. Cancelling
        the wait leaves the buffer untouched.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._total < minimum and not self._closed:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            if self._changed is None:
                self._changed = loop.create_future()
            # asyncio.wait never cancels the shared future, so one waiter's timeout or cancellation
            # cannot disturb the others.
            await asyncio.wait((self._changed,), timeout=remaining)
        return True

    def _wake(self) -> None:
        if self._changed is not None:
            if not self._changed.done():
                self._changed.set_result(None)
            self._changed = None

    def _seal(self, chunk: bytes, start: int) -> None:
        self._chunks.append(chunk)
        self._starts.append(start)
        retained = self.retained_start
        # Drop the chunks that lie wholly below the retained start.
        while (
            self._head < len(self._chunks)
            and self._starts[self._head] + len(self._chunks[self._head]) <= retained
        ):
            self._chunks[self._head] = b""
            self._head += 1
        if self._head >= _COMPACT_AFTER and 2 * self._head >= len(self._chunks):
            del self._chunks[: self._head]
            del self._starts[: self._head]
            self._head = 0

    def _slice(self, start: int, end: int) -> bytes:
        parts: list[bytes | bytearray | memoryview] = []
        position = start
        if position < self._tail_start:
            index = bisect_right(self._starts, position, self._head) - 1
            while position < end and index < len(self._chunks):
                chunk, chunk_start = self._chunks[index], self._starts[index]
                stop = min(len(chunk), end - chunk_start)
                parts.append(memoryview(chunk)[position - chunk_start : stop])
                position = chunk_start + stop
                index += 1
        if position < end:
            # A slice, not a view: a live view of the bytearray would forbid the next append to resize it.
            parts.append(self._tail[position - self._tail_start : end - self._tail_start])
        if len(parts) == 1:
            return bytes(parts[0])
        return b"".join(parts)
