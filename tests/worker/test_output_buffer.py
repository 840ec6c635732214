"""The output buffer of a background process (wuu.worker.native.output): a retained tail of one stream."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers import suspended, until
from wuu.worker.native.output import OutputBuffer


def test_buffer_matches_a_reference_stream() -> None:
    buffer = OutputBuffer(retain_bytes=1000)
    stream = bytearray()
    sizes = [1, 7, 300, 70_000, 2, 65_536, 5, 999, 1000, 1001, 3, 200_000, 1]
    for round_number, size in enumerate(sizes * 3):
        chunk = bytes((round_number + i) % 251 for i in range(size))
        buffer.append(chunk)
        stream += chunk
        total = len(stream)
        assert buffer.total_bytes == total
        assert buffer.retained_start == max(0, total - 1000)
        for offset in (0, max(0, total - 1000), max(0, total - 10), total, total + 5):
            for max_bytes in (1, 10, 5000):
                start, data, truncated = buffer.read(offset, max_bytes)
                assert truncated == (offset < total - 1000)
                assert start == max(offset, total - 1000, 0)
                assert data == bytes(stream[start : start + max_bytes])


def test_buffer_appends_of_a_large_stream_stay_linear() -> None:
    buffer = OutputBuffer()
    chunk = b"x" * 4096
    started = time.monotonic()
    for _ in range(25_000):  # 100 MiB in small pieces
        buffer.append(chunk)
    assert time.monotonic() - started < 10
    assert buffer.total_bytes == 25_000 * 4096
    start, data, truncated = buffer.read(0, 8 << 20)
    assert truncated and len(data) == 1 << 20 and start == buffer.total_bytes - (1 << 20)


async def test_buffer_waits_are_cancellable() -> None:
    buffer = OutputBuffer(retain_bytes=100)
    assert not await buffer.wait_total(1, 0.05)
    waiters = [asyncio.create_task(buffer.wait_total(3, None)) for _ in range(2)]
    await until(lambda: suspended(*waiters), "both waiters to wait")
    waiters[0].cancel()
    buffer.append(b"ab")
    buffer.append(b"c")
    assert await asyncio.wait_for(waiters[1], 5)
    assert waiters[0].cancelled()
    late = asyncio.create_task(buffer.wait_total(100, None))
    await until(lambda: suspended(late), "the late waiter to wait")
    buffer.close()
    assert await asyncio.wait_for(late, 5)
    with pytest.raises(ValueError):
        buffer.append(b"x")
