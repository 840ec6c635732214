"""A command's output streamed through `process/read`, beside the same output read from a bare pipe.

The reader keeps up as a host does: one `process/read` after another, each from the last `EndOffset`,
with the largest `MaxBytes` and a `Wait` for new bytes. The process is started without
`output_retention_bytes`, so the worker keeps its default retention (default_output_retention_bytes); a
writer as fast as `head -c /dev/zero` outruns the reads, and what the reads miss is the figure
`stream_share`. The same burst started with `output_flow: wait_for_reader` waits for the reads instead
(`stream/native_wait`, `stream_share/native_wait`): nothing is lost, at the reads' pace.
"""

from __future__ import annotations

import asyncio
import base64
import time

from wuu.generated.models import (
    PermissionMode,
    ProcessOutputFlow,
    ProcessReadParams,
    ProcessStartParams,
    ProcessStatus,
)
from wuu.worker.client import WorkerClient

from .config import MB, STREAM_READ, STREAM_WAIT_NS
from .samples import Samples, alternate
from .workers import forget_transcript


def stream_argv(size: int) -> list[str]:
    """A command that writes `size` bytes to its stdout as fast as it can."""
    return ["head", "-c", str(size), "/dev/zero"]


async def stream_round(native: WorkerClient, size: int, index: int, samples: Samples) -> None:
    """Round `index` of the streaming figures: a `size`-byte burst through process/read and a bare pipe.

    Samples: throughput to the exit seen (`stream/*`), the bytes the reads delivered per second
    (`stream_delivered/native`) and as a share of the burst (`stream_delivered_share/native`, and in
    percent `stream_share/*`: the bare pipe reader gets every byte, or the run fails).
    """
    for side in alternate(("bare", "native", "native_wait"), index):
        if side == "bare":
            samples.add("stream/bare", size / await stream_bare(size) / MB)
            samples.add("stream_share/bare", 100.0)
        else:
            elapsed, delivered = await stream_native(native, size, wait_for_reader=side == "native_wait")
            samples.add(f"stream/{side}", size / elapsed / MB)
            samples.add(f"stream_delivered/{side}", delivered / elapsed / MB)
            samples.add(f"stream_delivered_share/{side}", delivered / size)
            samples.add(f"stream_share/{side}", 100.0 * delivered / size)
        forget_transcript(native)


async def stream_native(client: WorkerClient, size: int, *, wait_for_reader: bool) -> tuple[float, int]:
    """Seconds from process/start until a read sees the ended process at the end of its output, and the
    bytes that the reads delivered (by default the worker keeps only a tail of the output, and a fast
    writer outruns the reads; with `wait_for_reader` the writer waits for them)."""
    began = time.perf_counter()
    flow = ProcessOutputFlow.WAIT_FOR_READER if wait_for_reader else ProcessOutputFlow.DROP_OLDEST
    process = await client.process_start(
        ProcessStartParams(
            argv=stream_argv(size), permission_mode=PermissionMode.UNCONFINED, output_flow=flow
        )
    )
    offset = delivered = 0
    while True:
        read = await client.process_read(
            ProcessReadParams.model_validate(
                {
                    "Process": process.id,
                    "MaxBytes": STREAM_READ,
                    "OffsetBytes": offset,
                    "Wait": STREAM_WAIT_NS,
                }
            )
        )
        delivered += len(base64.b64decode(read.output))
        offset = read.end_offset
        if read.process.status is not ProcessStatus.RUNNING and offset >= read.total_bytes:
            break
    elapsed = time.perf_counter() - began
    if read.total_bytes != size:
        raise RuntimeError(f"the process wrote {read.total_bytes} bytes, not {size}")
    client.pending_events()  # its started and exited events
    return elapsed, delivered


async def stream_bare(size: int) -> float:
    """The baseline: the same command's stdout read through a bare asyncio pipe, in reads as large."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*stream_argv(size), stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    total = 0
    while chunk := await process.stdout.read(STREAM_READ):
        total += len(chunk)
    await process.wait()
    elapsed = time.perf_counter() - began
    if total != size:
        raise RuntimeError(f"read {total} bytes, not {size}")
    return elapsed
