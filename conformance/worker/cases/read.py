"""process/read and process/write: Go casing, offsets, retention, long-polling, MinDwell and stdin."""

from __future__ import annotations

import asyncio
import base64

from wuu.generated import validators
from wuu.generated.catalog import (
    WORKER_DEFAULT_OUTPUT_RETENTION_BYTES,
    WORKER_MAX_OUTPUT_RETENTION_BYTES,
    WORKER_MIN_RETAINED_OUTPUT_BYTES,
)

from ..session import Session
from ..suite import WORKER
from .process import begin, get, output_of, read, read_until, shell, start, wait_ended

# The Go-cased result fields, as the spec names them.
READ_RESULT_KEYS = frozenset(validators.bundle()["$defs"]["ProcessReadResult"]["properties"])
SECOND = 1_000_000_000


@WORKER.case("read.go-casing")
async def go_casing(s: Session) -> None:
    """process/read takes Go-cased fields and answers them; snake_case or lower-case keys get invalid_request.

    The record inside the result stays snake_case.
    """
    await begin(s)
    record = await start(s, shell("printf hello"))
    await read_until(s, record["id"], 5)
    result = await s.ok(
        "process/read", {"Process": record["id"], "MaxBytes": 3, "OffsetBytes": 1, "Wait": 0, "MinDwell": 0}
    )
    s.expect(set(result) == READ_RESULT_KEYS, f"the process/read result keys are {sorted(result)}")
    data = output_of(s, result)
    s.expect(
        data and b"ell".startswith(data) and result["StartOffset"] == 1,
        f"MaxBytes 3 from OffsetBytes 1 of `hello` is {result}",
    )
    s.expect(
        {"id", "root_thread_id", "output_bytes"} <= set(result["Process"]),
        f"the record in a process/read result is not snake_case: {result['Process']}",
    )
    for wrong in (
        {"process": record["id"]},
        {"Process": record["id"], "offset_bytes": 0},
        {"Process": record["id"], "max_bytes": 10},
        {"Process": record["id"], "wait": 1},
        {"Process": record["id"], "min_dwell": 1},
        {"id": record["id"]},
    ):
        await s.error("process/read", wrong, "invalid_request")


@WORKER.case("read.offsets")
async def offsets(s: Session) -> None:
    """Output is canonical base64 of the combined stdout+stderr stream from StartOffset to EndOffset.

    Chunked reads continue at EndOffset and reassemble the stream; TotalBytes counts every byte and equals
    the record's output_bytes; an offset past the end reads nothing.
    """
    await begin(s)
    script = "printf 0123456789; printf ABCDEFGHIJ >&2; printf xyz"
    record = await start(s, shell(script))
    stream = await read_until(s, record["id"], 23)
    ended = await wait_ended(s, record["id"])
    s.expect(len(stream) == 23, f"the stream of `{script}` is {stream!r}")
    # stdout and stderr are one stream; their relative order is the adapter's to keep, each one's is not.
    s.expect(
        bytes(b for b in stream if not 65 <= b <= 74) == b"0123456789xyz"
        and bytes(b for b in stream if 65 <= b <= 74) == b"ABCDEFGHIJ",
        f"the combined stream {stream!r} is not stdout and stderr interleaved",
    )

    full, data = await read(s, record["id"])
    s.expect(data == stream, f"a read from 0 answers {data!r}, not {stream!r}")
    s.expect(
        full["StartOffset"] == 0 and full["EndOffset"] == 23 and full["TotalBytes"] == 23,
        f"a whole read answers StartOffset {full['StartOffset']}, EndOffset {full['EndOffset']}, "
        f"TotalBytes {full['TotalBytes']}",
    )
    s.expect(not full["Truncated"], "a read of a 23-byte stream is Truncated")
    s.expect(
        ended["output_bytes"] == 23 and full["Process"]["output_bytes"] == 23,
        f"output_bytes {ended['output_bytes']} differs from TotalBytes 23",
    )

    chunks, position = [], 0
    while position < 23:
        result, data = await read(s, record["id"], OffsetBytes=position, MaxBytes=4)
        s.expect(
            result["StartOffset"] == position and 0 < len(data) <= 4,
            f"MaxBytes 4 at {position} answers {len(data)} bytes from {result['StartOffset']}",
        )
        s.expect(result["TotalBytes"] == 23, f"TotalBytes changed to {result['TotalBytes']}")
        chunks.append(data)
        position = result["EndOffset"]
    s.expect(b"".join(chunks) == stream, f"the chunks {chunks} do not reassemble {stream!r}")

    middle, data = await read(s, record["id"], OffsetBytes=17, MaxBytes=100)
    s.expect(middle["StartOffset"] == 17 and data == stream[17:], f"a read at 17 answers {middle}")
    for offset in (23, 1000):
        past, data = await read(s, record["id"], OffsetBytes=offset)
        s.expect(
            data == b"" and past["TotalBytes"] == 23 and not past["Truncated"],
            f"a read at {offset} (the stream has 23 bytes) answers {past}",
        )


@WORKER.case("read.truncated")
async def truncated(s: Session) -> None:
    """With 1,000,000 bytes more output than the default retention, exactly the last 8 MiB stay readable.

    A read below the retained start answers from it with Truncated; reads from there on continue to
    TotalBytes without Truncated.
    """
    await begin(s)
    retention = WORKER_DEFAULT_OUTPUT_RETENTION_BYTES
    total = retention + 1_000_000
    record = await start(s, ["head", "-c", str(total), "/dev/zero"])
    await wait_complete(s, record["id"], total)
    first, data = await read(s, record["id"], OffsetBytes=0, MaxBytes=8 * 1024 * 1024)
    start_offset, end_offset = first["StartOffset"], first["EndOffset"]
    s.expect(first["TotalBytes"] == total, f"TotalBytes is {first['TotalBytes']}, not {total}")
    s.expect(set(data) <= {0}, "the output of head -c /dev/zero is not all zero bytes")
    s.expect(
        start_offset == total - retention,
        f"StartOffset {start_offset}: the default retention keeps the last {retention} of {total} bytes, "
        f"from {total - retention}",
    )
    s.expect(first["Truncated"], f"a read at 0 answered from StartOffset {start_offset} without Truncated")
    s.expect(end_offset == total, f"an 8 MiB read from the retained start ends at {end_offset}, not {total}")
    below, _ = await read(s, record["id"], OffsetBytes=start_offset - 1, MaxBytes=10)
    s.expect(
        below["Truncated"] and below["StartOffset"] == start_offset,
        f"a read one byte below the retained start {start_offset} answers {dict(below, Output='...')}",
    )
    position = start_offset
    while position < total:
        result, chunk = await read(s, record["id"], OffsetBytes=position, MaxBytes=1_000_000)
        s.expect(
            not result["Truncated"] and result["StartOffset"] == position and chunk,
            f"a read at {position}, inside the retained output, answers {dict(result, Output='...')}",
        )
        position = result["EndOffset"]
    s.expect(position == total, f"the continuation reads end at {position}, not {total}")


@WORKER.case("read.retention")
async def retention(s: Session) -> None:
    """process/start's output_retention_bytes sets how much output stays readable: exactly that many bytes.

    Processes that ask for 1 MiB (the smallest) and for 16 MiB (twice the default) each write 1,000,000
    bytes more: a read at 0 answers from TotalBytes minus the retention, with Truncated, and a read there
    is not truncated. A retention below 1 MiB or above 64 MiB, or not an integer, gets invalid_request.
    """
    await begin(s)
    mode = await s.command_mode()
    for wrong in (0, WORKER_MIN_RETAINED_OUTPUT_BYTES - 1, WORKER_MAX_OUTPUT_RETENTION_BYTES + 1, "8MiB"):
        await s.error(
            "process/start",
            {"argv": ["true"], "permission_mode": mode, "output_retention_bytes": wrong},
            "invalid_request",
        )
    for retention in (WORKER_MIN_RETAINED_OUTPUT_BYTES, 2 * WORKER_DEFAULT_OUTPUT_RETENTION_BYTES):
        total = retention + 1_000_000
        record = await start(s, ["head", "-c", str(total), "/dev/zero"], output_retention_bytes=retention)
        await wait_complete(s, record["id"], total)
        first, _ = await read(s, record["id"], OffsetBytes=0, MaxBytes=1)
        s.expect(
            first["Truncated"] and first["StartOffset"] == total - retention,
            f"with output_retention_bytes {retention} and {total} bytes written, a read at 0 answers from "
            f"{first['StartOffset']} (Truncated {first['Truncated']}), not from {total - retention} (Truncated)",
        )
        kept, data = await read(s, record["id"], OffsetBytes=total - retention, MaxBytes=1)
        s.expect(
            not kept["Truncated"] and kept["StartOffset"] == total - retention and data == b"\0",
            f"with output_retention_bytes {retention}, a read at the retained start {total - retention} "
            f"answers {dict(kept, Output='...')}",
        )


@WORKER.case("read.wait-for-reader")
async def wait_for_reader(s: Session) -> None:
    """With output_flow wait_for_reader the process waits for its reader and no byte is lost.

    A process that writes 3 MiB at once into a 1 MiB retention stalls, still running, once its unread
    output nears the retention (the output it counts stays within it); a reader going from each EndOffset
    then gets all 3 MiB, never Truncated, and the process exits. Any other output_flow gets invalid_request.
    """
    await begin(s)
    mode = await s.command_mode()
    await s.error(
        "process/start",
        {"argv": ["true"], "permission_mode": mode, "output_flow": "block"},
        "invalid_request",
    )
    retention = WORKER_MIN_RETAINED_OUTPUT_BYTES
    total = 3 * retention
    record = await start(
        s,
        ["head", "-c", str(total), "/dev/zero"],
        output_retention_bytes=retention,
        output_flow="wait_for_reader",
    )

    async def stalled() -> bool:
        return bool((await get(s, record["id"]))["output_bytes"] >= retention // 2)

    await s.until(stalled, "the process to write half its retention")
    await asyncio.sleep(0.2)  # time enough to write the rest, were it not waiting
    waiting = await get(s, record["id"])
    s.expect(
        waiting["status"] == "running" and waiting["output_bytes"] <= retention,
        f"with nothing read, a process writing {total} bytes into a {retention}-byte retention is "
        f"{waiting['status']} with {waiting['output_bytes']} bytes counted: it should wait, within the retention",
    )
    data = await read_until(s, record["id"], total)
    s.expect(data == bytes(total), f"the reader got {len(data)} bytes, not the {total} zero bytes written")
    ended = await wait_ended(s, record["id"])
    s.expect(ended["status"] == "exited", f"head -c ended {ended['status']} once read")


async def wait_complete(s: Session, process_id: str, total: int) -> None:
    """Wait until the process has ended by itself with `total` bytes of output counted."""
    ended = await wait_ended(s, process_id)
    s.expect(ended["status"] == "exited", f"head -c ended {ended['status']}")

    async def complete() -> bool:
        return bool((await get(s, process_id))["output_bytes"] >= total)

    await s.until(complete, f"the record to count {total} bytes")


@WORKER.case("read.long-poll")
async def long_poll(s: Session) -> None:
    """With no new bytes a read waits (Wait in ns) and answers as soon as bytes arrive, well before Wait.

    The second read starts at the first one's EndOffset and gets only the new bytes.
    """
    await begin(s)
    record = await start(s, shell("printf a; sleep 1; printf b; sleep 30"))
    loop = asyncio.get_running_loop()
    first, data = await read(s, record["id"], OffsetBytes=0, Wait=10 * SECOND)
    s.expect(data == b"a", f"a long-poll read at 0 answers {data!r}, not b'a'")
    s.expect(not first["TimedOut"], "a read that got bytes says TimedOut")
    began = loop.time()
    second, data = await read(s, record["id"], OffsetBytes=first["EndOffset"], Wait=10 * SECOND)
    elapsed = loop.time() - began
    s.expect(data == b"b", f"a long-poll read at {first['EndOffset']} answers {data!r}, not b'b'")
    s.expect(second["StartOffset"] == 1 and second["EndOffset"] == 2, f"the second read answers {second}")
    s.expect(not second["TimedOut"], "a read that got bytes says TimedOut")
    s.expect(elapsed < 6, f"the read answered {elapsed:.1f} s after it began, not when the byte arrived")
    s.expect(
        second["Duration"] < 10 * SECOND,
        f"Duration {second['Duration']} ns is not below the 10 s Wait though bytes arrived after ~1 s",
    )


@WORKER.case("read.timed-out", "read.long-poll")
async def timed_out(s: Session) -> None:
    """A silent process's read with Wait 0.3 s times out: TimedOut, no Output, Duration >= 3e8 ns.

    Without Wait, or for an ended process, the read does not wait and TimedOut is false.
    """
    await begin(s)
    silent = await start(s, shell("sleep 30"))
    loop = asyncio.get_running_loop()
    began = loop.time()
    result, data = await read(s, silent["id"], Wait=300_000_000)
    elapsed = loop.time() - began
    s.expect(
        result["TimedOut"], f"a read of a silent process with Wait 0.3 s answers TimedOut false: {result}"
    )
    s.expect(data == b"" and result["TotalBytes"] == 0, f"a silent process's read has output: {result}")
    s.expect(
        result["Duration"] >= 300_000_000,
        f"Duration {result['Duration']} is below the 3e8 ns Wait it timed out after (not nanoseconds?)",
    )
    s.expect(result["Duration"] < 60 * SECOND, f"Duration {result['Duration']} ns for a 0.3 s wait")
    s.expect(elapsed >= 0.29, f"the read timed out after {elapsed:.3f} s, before its 0.3 s Wait")

    now, _ = await read(s, silent["id"])
    s.expect(not now["TimedOut"], "a read without Wait says TimedOut")

    quick = await start(s, shell("exit 0"))
    await wait_ended(s, quick["id"])
    began = loop.time()
    ended, data = await read(s, quick["id"], Wait=10 * SECOND)
    s.expect(not ended["TimedOut"] and data == b"", f"a read of an ended silent process answers {ended}")
    s.expect(loop.time() - began < 6, "a read of an ended process waited for bytes that cannot come")


@WORKER.case("read.min-dwell")
async def min_dwell(s: Session) -> None:
    """After the first new byte a read keeps collecting for MinDwell ns, bounded by MaxBytes.

    Bytes written 0.3 s after the first one come in the same reply with MinDwell 2 s; with MaxBytes 2 and
    MinDwell 8 s the read answers once it has two bytes.
    """
    await begin(s)
    script = "sleep 1; printf a; sleep 0.3; printf b; sleep 30"
    dwell = await start(s, shell(script))
    bounded = await start(s, shell(script))
    loop = asyncio.get_running_loop()

    async def timed(process_id: str, **params: int) -> tuple[dict[str, object], bytes, float]:
        began = loop.time()
        result, data = await read(s, process_id, Wait=10 * SECOND, **params)
        return result, data, loop.time() - began

    (_, dwelt, _), (_, capped, capped_time) = await asyncio.gather(
        timed(dwell["id"], MinDwell=2 * SECOND),
        timed(bounded["id"], MinDwell=8 * SECOND, MaxBytes=2),
    )
    s.expect(dwelt == b"ab", f"with MinDwell 2 s the read answers {dwelt!r}, not b'ab'")
    s.expect(capped == b"ab", f"with MaxBytes 2 and MinDwell 8 s the read answers {capped!r}")
    s.expect(
        capped_time < 6,
        f"with MaxBytes 2 the read answered after {capped_time:.1f} s, not once it had two bytes",
    )


@WORKER.case("write.stdin")
async def stdin(s: Session) -> None:
    """process/write feeds stdin (base64 data) of a process started with stdin: true; close ends it.

    A process without stdin, or whose stdin is closed, gets invalid_request.
    """
    await begin(s)
    s.require_method("process/write")
    cat = await start(s, ["cat"], stdin=True)

    def encoded(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    written = await s.ok("process/write", {"id": cat["id"], "data": encoded(b"hello\n")})
    s.expect(written["id"] == cat["id"], f"process/write answers the record of {written['id']}")
    s.expect(await read_until(s, cat["id"], 6) == b"hello\n", "cat did not echo the bytes written")
    await s.ok("process/write", {"id": cat["id"], "data": encoded(b"\x00\xffbye"), "close": True})
    echoed = await read_until(s, cat["id"], 5, offset=6)
    s.expect(echoed == b"\x00\xffbye", f"cat echoed {echoed!r}, not the binary bytes written")
    ended = await wait_ended(s, cat["id"])
    s.expect(
        ended["status"] == "exited" and ended["exit_code"] == 0,
        f"cat did not exit 0 at the end of its stdin: {ended}",
    )
    await s.error("process/write", {"id": cat["id"], "data": encoded(b"late")}, "invalid_request")
    no_stdin = await start(s, shell("sleep 30"))
    await s.error("process/write", {"id": no_stdin["id"], "data": encoded(b"x")}, "invalid_request")
