"""A background process's output and input on the native worker: process/read (offsets, truncation, long
polls, MinDwell, cancel) and process/write (stdin).

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from pathlib import Path

import pytest

from tests.helpers import (
    DEADLINE,
    MIB,
    READ_RESULT_KEYS,
    SECOND_NS,
    check_record,
    children,
    code,
    lines,
    ok,
    output_until,
    read,
    start,
    wait_ended,
)
from wuu.generated.catalog import (
    WORKER_DEFAULT_OUTPUT_RETENTION_BYTES,
    WORKER_MAX_OUTPUT_RETENTION_BYTES,
    WORKER_MIN_RETAINED_OUTPUT_BYTES,
)
from wuu.worker.client import WorkerClient
from wuu.worker.errors import split_error

DEADLINE_NS = int(DEADLINE * SECOND_NS)


def status_kib(pid: int, field: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text("ascii").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {field}")


# --- process/read -----------------------------------------------------------------------------------------


async def test_process_read_speaks_go_casing_both_ways(worker: WorkerClient) -> None:
    record = await start(worker, ["printf", "hello"])
    await wait_ended(worker, record["id"])
    result = await read(worker, record["id"], OffsetBytes=0, MaxBytes=100, Wait=0, MinDwell=0)
    assert set(result) == READ_RESULT_KEYS
    check_record(result["Process"])
    for data in (
        {"process": record["id"]},
        {"Process": record["id"], "offset_bytes": 0},
        {"Process": record["id"], "max_bytes": 10},
        {"id": record["id"]},
    ):
        assert code(await worker.request("process/read", data)) == "invalid_request", data


async def test_process_read_output_is_base64_and_offsets_continue(worker: WorkerClient) -> None:
    record = await start(worker, ["printf", "hello world\\000\\377"])
    await wait_ended(worker, record["id"])
    first = await read(worker, record["id"], MaxBytes=5)
    assert base64.b64decode(first["Output"], validate=True) == b"hello"
    assert (first["StartOffset"], first["EndOffset"], first["TotalBytes"]) == (0, 5, 13)
    assert first["Truncated"] is False and first["TimedOut"] is False
    rest = await read(worker, record["id"], OffsetBytes=first["EndOffset"])
    assert base64.b64decode(rest["Output"], validate=True) == b" world\x00\xff"
    assert (rest["StartOffset"], rest["EndOffset"], rest["TotalBytes"]) == (5, 13, 13)
    past = await read(worker, record["id"], OffsetBytes=13)
    assert past["Output"] == "" and (past["StartOffset"], past["EndOffset"]) == (13, 13)
    assert rest["Process"]["output_bytes"] == 13


@pytest.mark.parametrize(
    "retention",
    [WORKER_MIN_RETAINED_OUTPUT_BYTES, None, 2 * WORKER_DEFAULT_OUTPUT_RETENTION_BYTES],
    ids=["smallest", "default", "twice-the-default"],
)
async def test_process_read_is_truncated_exactly_at_the_retention(
    worker: WorkerClient, root: Path, retention: int | None
) -> None:
    kept = WORKER_DEFAULT_OUTPUT_RETENTION_BYTES if retention is None else retention
    content = os.urandom(kept + 123_457)
    total = len(content)
    (root / "out.bin").write_bytes(content)
    asked = {} if retention is None else {"output_retention_bytes": retention}
    record = await start(worker, ["cat", "out.bin"], **asked)
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "exited" and ended["output_bytes"] == total
    first = await read(worker, record["id"], OffsetBytes=0, MaxBytes=MIB)
    assert first["Truncated"] is True and first["TotalBytes"] == total
    assert (first["StartOffset"], first["EndOffset"]) == (total - kept, total - kept + MIB)
    assert base64.b64decode(first["Output"]) == content[total - kept : total - kept + MIB]
    below = await read(worker, record["id"], OffsetBytes=total - kept - 1, MaxBytes=10)
    assert below["Truncated"] is True and below["StartOffset"] == total - kept
    # From the retained start on, the reads continue to the end untruncated, and hold the stream's tail.
    tail, offset = b"", total - kept
    while offset < total:
        chunk = await read(worker, record["id"], OffsetBytes=offset, MaxBytes=8 * MIB)
        assert chunk["Truncated"] is False and chunk["StartOffset"] == offset
        tail += base64.b64decode(chunk["Output"])
        offset = chunk["EndOffset"]
    assert tail == content[-kept:]


async def test_output_retention_bytes_out_of_range_gets_invalid_request(worker: WorkerClient) -> None:
    for wrong in (
        0,
        WORKER_MIN_RETAINED_OUTPUT_BYTES - 1,
        WORKER_MAX_OUTPUT_RETENTION_BYTES + 1,
        -1,
        "8MiB",
        None,
        True,
    ):
        reply = await worker.request(
            "process/start",
            {"argv": ["true"], "permission_mode": "standard", "output_retention_bytes": wrong},
        )
        assert code(reply) == "invalid_request", wrong
        assert split_error(reply["error"])[1].startswith("output_retention_bytes: "), reply
    assert ok(await worker.request("process/list", {}))["processes"] == []
    for bound in (WORKER_MIN_RETAINED_OUTPUT_BYTES, WORKER_MAX_OUTPUT_RETENTION_BYTES):
        record = await start(worker, ["printf", "x"], output_retention_bytes=bound)
        assert (await wait_ended(worker, record["id"]))["status"] == "exited"


async def test_the_largest_retention_is_not_allocated_up_front(worker: WorkerClient) -> None:
    """Retention bounds what a process's output may hold: many quiet processes at the largest retention
    cost the worker a little memory each, not 64 MiB each."""
    assert worker.process is not None
    workers = [worker.process.pid, *children(worker.process.pid)]  # the delegate's peer too

    def rss_kib() -> int:
        return sum(status_kib(pid, "VmRSS") for pid in workers)

    warm = await start(worker, ["printf", "x"], output_retention_bytes=WORKER_MAX_OUTPUT_RETENTION_BYTES)
    await wait_ended(worker, warm["id"])  # the first start loads what every later one reuses
    before = rss_kib()
    records = [
        await start(worker, ["printf", "x"], output_retention_bytes=WORKER_MAX_OUTPUT_RETENTION_BYTES)
        for _ in range(32)
    ]
    for record in records:
        assert (await read(worker, record["id"], Wait=DEADLINE_NS))["TotalBytes"] == 1
    # 32 processes at 64 MiB would be 2 GiB; their records and pipes are a few KiB each.
    assert rss_kib() - before < 32 * 1024


async def test_process_read_returns_at_most_64_kib_by_default(worker: WorkerClient) -> None:
    record = await start(worker, ["head", "-c", "100000", "/dev/zero"])
    await wait_ended(worker, record["id"])
    result = await read(worker, record["id"])
    assert (result["StartOffset"], result["EndOffset"], result["TotalBytes"]) == (0, 65_536, 100_000)
    reply = await worker.request("process/read", {"Process": record["id"], "MaxBytes": 8 * MIB + 1})
    assert code(reply) == "invalid_request"


async def test_process_read_long_poll_returns_early_when_bytes_arrive(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    began = time.monotonic()
    pending = asyncio.create_task(read(worker, record["id"], Wait=30 * SECOND_NS))
    # Handlers start in arrival order: once this round trip is answered, the read is waiting.
    ok(await worker.request("process/get", {"id": record["id"]}))
    assert not pending.done()
    data = base64.b64encode(b"ping\n").decode()
    ok(await worker.request("process/write", {"id": record["id"], "data": data}))
    result = await asyncio.wait_for(pending, DEADLINE)
    assert base64.b64decode(result["Output"]) == b"ping\n"
    assert result["TimedOut"] is False
    assert time.monotonic() - began < 15 and result["Duration"] < 15 * SECOND_NS


async def test_process_read_times_out_only_when_no_bytes_came(worker: WorkerClient) -> None:
    silent = await start(worker, ["sleep", "1000"])
    waited = await read(worker, silent["id"], Wait=300_000_000)
    assert waited["TimedOut"] is True and waited["Output"] == ""
    assert waited["Duration"] >= 250_000_000
    talker = await start(worker, ["sh", "-c", "echo ready; sleep 1000"])
    await lines(worker, talker["id"], 1)
    began = time.monotonic()
    ready = await read(worker, talker["id"], Wait=30 * SECOND_NS)
    assert ready["TimedOut"] is False and base64.b64decode(ready["Output"]) == b"ready\n"
    assert time.monotonic() - began < 15
    quiet_end = await start(worker, ["true"])
    await wait_ended(worker, quiet_end["id"])
    ended = await read(worker, quiet_end["id"], Wait=30 * SECOND_NS)
    assert ended["TimedOut"] is False and ended["Output"] == ""


async def test_process_read_min_dwell_collects_a_burst(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    pending = asyncio.create_task(read(worker, record["id"], Wait=30 * SECOND_NS, MinDwell=2 * SECOND_NS))
    ok(await worker.request("process/get", {"id": record["id"]}))
    for chunk in (b"a\n", b"b\n"):
        ok(
            await worker.request(
                "process/write", {"id": record["id"], "data": base64.b64encode(chunk).decode()}
            )
        )
        ok(await worker.request("process/get", {"id": record["id"]}))
    result = await asyncio.wait_for(pending, DEADLINE)
    assert base64.b64decode(result["Output"]) == b"a\nb\n"
    assert result["TimedOut"] is False


async def test_process_read_min_dwell_is_bounded_by_max_bytes(worker: WorkerClient) -> None:
    record = await start(worker, ["sh", "-c", "echo abcdef; sleep 1000"])
    await lines(worker, record["id"], 1)
    began = time.monotonic()
    result = await read(worker, record["id"], MaxBytes=2, MinDwell=30 * SECOND_NS)
    assert base64.b64decode(result["Output"]) == b"ab"
    assert time.monotonic() - began < 15


async def test_process_read_min_dwell_ends_when_the_process_ends(worker: WorkerClient) -> None:
    record = await start(worker, ["sh", "-c", "echo a; sleep 0.2; echo b"])
    began = time.monotonic()
    result = await read(worker, record["id"], Wait=30 * SECOND_NS, MinDwell=30 * SECOND_NS)
    assert base64.b64decode(result["Output"]) == b"a\nb\n"
    assert time.monotonic() - began < 15


async def test_cancelling_a_long_poll_read_answers_cancelled(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    target = worker.expect_reply("long-read")
    await worker.send_frame(
        {
            "id": "long-read",
            "method": "process/read",
            "token": worker.token,
            "data": {"Process": record["id"], "Wait": 60 * SECOND_NS},
        }
    )
    assert ok(await worker.request("cancel", {"id": "long-read"})) == {"cancelled": True}
    assert code(await asyncio.wait_for(target, DEADLINE)) == "cancelled"


# --- process/write ----------------------------------------------------------------------------------------


async def test_process_write_feeds_stdin_and_close_ends_it(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    written = ok(
        await worker.request(
            "process/write", {"id": record["id"], "data": base64.b64encode(b"hello\n").decode()}
        )
    )
    check_record(written)
    assert await output_until(worker, record["id"], lambda out: b"\n" in out) == b"hello\n"
    ok(await worker.request("process/write", {"id": record["id"], "data": "", "close": True}))
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "exited" and ended["exit_code"] == 0
    reply = await worker.request("process/write", {"id": record["id"], "data": "eA=="})
    assert code(reply) == "invalid_request"


async def test_process_write_without_stdin_gets_invalid_request(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    assert (
        code(await worker.request("process/write", {"id": record["id"], "data": "eA=="})) == "invalid_request"
    )


async def test_process_write_of_invalid_base64_gets_invalid_request(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    reply = await worker.request("process/write", {"id": record["id"], "data": "not base64!!"})
    assert code(reply) == "invalid_request"
