"""The output buffer of a background process (wuu.worker.native.output): a retained tail of one stream."""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from tests.helpers import suspended, until
from wuu.generated.catalog import (
    WORKER_DEFAULT_OUTPUT_RETENTION_BYTES,
    WORKER_MAX_OUTPUT_RETENTION_BYTES,
    WORKER_MIN_RETAINED_OUTPUT_BYTES,
)
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
    buffer = OutputBuffer(WORKER_DEFAULT_OUTPUT_RETENTION_BYTES)
    chunk = b"x" * 4096
    started = time.monotonic()
    for _ in range(25_000):  # 100 MiB in small pieces
        buffer.append(chunk)
    assert time.monotonic() - started < 10
    assert buffer.total_bytes == 25_000 * 4096
    start, data, truncated = buffer.read(0, 8 << 20)
    assert truncated and len(data) == 8 << 20 and start == buffer.total_bytes - (8 << 20)


def test_buffer_holds_its_retention_at_most() -> None:
    # The retention bounds what a buffer holds; a quiet process's buffer holds only what it wrote.
    tracemalloc.start()
    try:
        buffers = [OutputBuffer(WORKER_MAX_OUTPUT_RETENTION_BYTES) for _ in range(100)]
        for buffer in buffers:
            buffer.append(b"x" * 100)
        quiet, _ = tracemalloc.get_traced_memory()
        assert quiet < 1 << 20  # 100 buffers at 64 MiB each, with 100 bytes in each
        tracemalloc.reset_peak()
        loud = OutputBuffer(WORKER_MIN_RETAINED_OUTPUT_BYTES)
        for _ in range(256):  # 16 MiB through a 1 MiB retention, in pipe-sized reads
            loud.append(b"y" * 65536)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The retention and one chunk of the stream: never the 16 MiB written.
    assert held - quiet < 2 << 20 and peak - quiet < 3 << 20
    assert loud.read(0, 8 << 20)[1] == b"y" * (1 << 20)


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
