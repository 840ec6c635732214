"""The connection's lifetime: cleanup at EOF, and background processes that outlive their requests."""

from __future__ import annotations

import asyncio
from typing import Any

from ..session import Session, code_of
from ..suite import WORKER
from .process import (
    begin,
    expect_growing,
    expect_quiet,
    file_size,
    get,
    heartbeat_script,
    read_until,
    shell,
    start,
)

SECOND = 1_000_000_000


async def send_read(s: Session, process_id: str, wait_ns: int) -> tuple[str, asyncio.Future[dict[str, Any]]]:
    """Send a long-poll process/read by hand; its id and the future of its reply."""
    frame_id = s.client.next_id()
    waiter = s.client.expect_reply(frame_id)
    await s.client.send_frame(
        {
            "id": frame_id,
            "method": "process/read",
            "token": s.client.token,
            "data": {"Process": process_id, "Wait": wait_ns},
        }
    )
    return frame_id, waiter


@WORKER.case("lifetime.eof-cleanup")
async def eof_cleanup(s: Session) -> None:
    """At EOF, with a process tree running and a 60 s long-poll read in flight, the adapter exits promptly.

    Where the root is on this machine, the tree's grandchild heartbeat file stops growing once it has exited.
    """
    await begin(s)
    await start(s, shell(heartbeat_script("heartbeat")))
    silent = await start(s, shell("sleep 60"))

    async def size() -> int:
        return await file_size(s, "heartbeat")

    await expect_growing(s, size, "the grandchild's heartbeat file")
    local_file = s.root / "heartbeat"
    local = local_file.is_file() and local_file.stat().st_size > 0
    _, waiter = await send_read(s, silent["id"], 60 * SECOND)
    await s.ok("process/list", {})  # requests overlap: the read is in flight behind this reply
    s.expect(not waiter.done(), f"a 60 s long-poll read of a silent process answered at once: {waiter}")

    outcome = await s.client.close(budget=s.timeout)
    s.expect(
        not outcome.killed,
        f"the adapter did not exit within {s.timeout:g} s of EOF (a read in flight, two process trees)",
    )
    if not local:
        return  # a remote root: the tree's end cannot be observed once the connection is gone

    async def local_size() -> int:
        return local_file.stat().st_size

    await expect_quiet(s, local_size, "after the adapter exited, the grandchild's heartbeat file")


@WORKER.case("lifetime.detached-processes")
async def detached_processes(s: Session) -> None:
    """A process outlives the request that started it: after the start reply it keeps running and writing.

    It stays readable and listed as running, and cancelling a read of a process does not end that process.
    """
    await begin(s)
    ticker = await start(s, shell("while :; do printf x; sleep 0.05; done"))
    silent = await start(s, shell("sleep 60"))
    seen = await read_until(s, ticker["id"], 3)
    more = await read_until(s, ticker["id"], 3, offset=len(seen))
    # At least 3 more bytes (a busy machine may have let more pile up before the read).
    s.expect(
        more == b"x" * len(more), f"the process wrote {more!r} after its start request had been answered"
    )
    listed = {record["id"]: record for record in (await s.ok("process/list", {}))["processes"]}
    for record in (ticker, silent):
        s.expect(
            listed.get(record["id"], {}).get("status") == "running",
            f"process/list shows process {record['id']} as {listed.get(record['id'])}, not running",
        )

    frame_id, waiter = await send_read(s, silent["id"], 30 * SECOND)
    await s.ok("process/list", {})  # the read is in flight behind this reply
    cancel = await s.ok("cancel", {"id": frame_id})
    s.expect(cancel["cancelled"] is True, f"cancel of a read in flight answers {cancel}")
    reply = await s.wait_reply("process/read", waiter)
    s.expect(code_of(reply) == "cancelled", f"the cancelled read answered {reply}")
    for record in (silent, ticker):
        now = await get(s, record["id"])
        s.expect(
            now["status"] == "running", f"process {record['id']} is {now['status']} after a cancelled read"
        )
    total = (await get(s, ticker["id"]))["output_bytes"]
    later = await read_until(s, ticker["id"], 2, offset=total)
    s.expect(later == b"x" * len(later), f"the process stopped writing after a cancelled read: {later!r}")
