"""A command's output streamed through `process/read`, beside the same output read from a bare pipe."""

from __future__ import annotations

import asyncio
import base64
import time

from wuu.generated.models import PermissionMode, ProcessReadParams, ProcessStartParams, ProcessStatus
from wuu.worker.client import WorkerClient

from .config import STREAM_READ, STREAM_WAIT_NS


def stream_argv(size: int) -> list[str]:
    """A command that writes `size` bytes to its stdout as fast as it can."""
    return ["head", "-c", str(size), "/dev/zero"]


async def stream_native(client: WorkerClient, size: int) -> tuple[float, int]:
    """Seconds from process/start until a read sees the ended process at the end of its output, and the
    bytes that the reads delivered (the worker keeps only a tail of the output: a fast writer outruns
    the reads)."""
    began = time.perf_counter()
    process = await client.process_start(
        ProcessStartParams(argv=stream_argv(size), permission_mode=PermissionMode.UNCONFINED)
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
