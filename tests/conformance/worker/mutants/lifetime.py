"""Mutants of the connection's lifetime: cleanup at EOF, and background processes that outlive their
requests."""

from __future__ import annotations

import asyncio
import dataclasses

from wuu.generated.models import ExecutionProcessV4, ProcessSignal, ProcessStartParams, ProcessStatus
from wuu.worker import ExecutionBackendV4, Handler, RequestContext
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import override, reap_descendants_later


@mutant(
    "eof-leaves-processes",
    "exits at EOF without stopping its process trees",
    "lifetime.eof-cleanup",
)
def eof_leaves_processes(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """At the end of the connection the worker only detaches, as a persistent worker does: its process
    trees outlive it (and so do its private directory and the workspace, which the reference keeps too
    when it cannot stop the trees).

    A detached reaper kills what is left of the trees 15 s after the connection ends.
    """

    async def close() -> None:
        reap_descendants_later()
        await worker.detach()

    return dataclasses.replace(backend, close=close)


@mutant(
    "detached-dies-with-request",
    "stops a background process as soon as its process/start request has been answered",
    "lifetime.detached-processes",
)
def detached_dies_with_request(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Each process/start that answers a running record schedules a KILL stop of that process, to run right
    after the reply."""
    stops: set[asyncio.Task[ExecutionProcessV4]] = set()  # held until done, or they may be collected

    def stop(process_id: str) -> None:
        task = asyncio.create_task(worker.processes.stop(process_id, ProcessSignal.KILL, 0))
        stops.add(task)
        task.add_done_callback(stops.discard)

    def make(original: Handler) -> Handler:
        async def handler(params: ProcessStartParams, context: RequestContext) -> ExecutionProcessV4:
            record = await original(params, context)
            assert isinstance(record, ExecutionProcessV4)
            if record.status is ProcessStatus.RUNNING:
                # One more turn of the loop: the reply is queued when this handler's task completes.
                asyncio.get_running_loop().call_soon(stop, record.id)
            return record

        return handler

    return override(backend, "process/start", make)
