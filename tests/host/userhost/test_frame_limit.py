"""A line over the frame limit, sent to a user host process over its Unix socket: the host refuses it by the
spec (`parse_error` with a null id, after which the connection goes on) without ever holding the line, as
its peak memory shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import MIB
from tests.host.userhost.test_fuzz import (
    INITIALIZE,
    MAIN_SESSION,
    HostProcess,
    RawConnection,
    request,
    start_host,
    stop_host,
)
from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES

LINE_BYTES = 160 * MIB
CHUNK = MIB
SLACK = 16 * MIB


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


@pytest.fixture
async def host_process(home: Path, run_dir: Path) -> AsyncIterator[HostProcess]:
    """A user host process whose peak RSS counts what it holds.

    glibc's malloc otherwise raises its mmap threshold after the first large free and then serves large
    buffers from its heap, where a freed one stays resident and a growing one may be copied: the peak would
    measure the allocator's history rather than what the host holds. A fixed threshold keeps every large
    buffer in its own mapping, given back when freed.
    """
    host = await start_host(home, run_dir / "userhost.sock", {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)})
    yield host
    await stop_host(host)


async def test_an_over_limit_line_is_refused_as_it_streams_in(host_process: HostProcess) -> None:
    client = await RawConnection.open(host_process.socket)
    other = await RawConnection.open(host_process.socket)
    for connection in (client, other):
        await connection.send(request(1, "initialize", INITIALIZE))
        assert "result" in await connection.response(1)
    baseline = peak_rss(host_process.pid)

    # A request whose line never ends, 160 MiB (5x the limit) sent a MiB at a time.
    await client.send(b'{"jsonrpc":"2.0","id":"big","method":"initialize","params":{"pad":"')
    for sent in range(LINE_BYTES // CHUNK):
        await client.send(b"x" * CHUNK)
        if sent == LINE_BYTES // CHUNK // 2:
            # Half way through, the host still serves everyone (the line is not answered before it ends).
            await other.send(request(2, "plugin/client/request", MAIN_SESSION))
            assert (await other.response(2))["result"] == {"result": {"session_id": "main"}}
            assert client.received == [{"jsonrpc": "2.0", "id": 1, "result": client.received[0]["result"]}]
    await client.send(b'"}}\n')
    await client.send(request(2, "plugin/client/request", MAIN_SESSION))
    reply = await client.response(2)

    refusal, answer = client.received[1:]
    assert refusal["id"] is None and refusal["error"]["code"] == -32700
    assert refusal["error"]["data"] == {"code": "parse_error"}
    assert answer == reply and reply["result"] == {"result": {"session_id": "main"}}
    assert not client.eof.is_set()

    # Reading the line whole would take its 160 MiB. Discarding it as it arrives holds the reader's buffer:
    # at most one frame limit of the line and one socket read (it is emptied each time it passes the limit).
    # Resizing a buffer whose front was taken copies it, so for a moment there are two: 2x the limit, plus
    # SLACK for the interpreter's own allocations. Still half of what holding the line would take.
    grown = peak_rss(host_process.pid) - baseline
    assert grown < 2 * USERHOST_MAX_FRAME_BYTES + SLACK, f"the host's peak RSS grew by {grown / MIB:.0f} MiB"
    await client.close()
    await other.close()
