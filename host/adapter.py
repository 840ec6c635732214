"""`wuu-host adapter`: any backend as a command adapter, serving the v4 protocol on this process's stdio.

It provisions the profile's environment, starts the worker in it, and relays frames both ways; the
token and binding checks still happen in the worker. The profile's `forward_env` variables travel in
the binding: every `initialize` gets them merged into its `environment` (the same way each time, so an
equal re-initialize stays equal). At EOF the worker gets EOF, and the profile's shutdown budget bounds
everything after it; past the budget the transport is terminated and the failure reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping

import orjson

from wuu.worker.streams import connect_pipes

from .backends import environment_for
from .profiles import Profile

log = logging.getLogger("wuu.host.adapter")


def with_forwarded(line: bytes, forwarded: Mapping[str, str]) -> bytes:
    """An `initialize` frame with the forwarded variables merged under its binding's own environment."""
    if not forwarded or b'"initialize"' not in line:
        return line
    try:
        frame = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line  # the worker judges malformed frames
    data = frame.get("data") if isinstance(frame, dict) and frame.get("method") == "initialize" else None
    if not isinstance(data, dict):
        return line
    given = data.get("environment")
    data["environment"] = {**forwarded, **(given if isinstance(given, dict) else {})}
    return orjson.dumps(frame) + b"\n"


async def _pump_in(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, forwarded: Mapping[str, str]
) -> None:
    """Host -> worker, frame by frame; ends at EOF or at a frame no worker could accept (then EOF too)."""
    try:
        while True:
            line = await reader.readuntil(b"\n")
            writer.write(with_forwarded(line, forwarded))
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def _pump_out(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Worker -> host, as bytes."""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(1 << 20):
            writer.write(chunk)
            await writer.drain()


async def serve_adapter(profile: Profile, environ: Mapping[str, str] | None = None) -> None:
    """Serve one connection through the profile's environment. Raises CleanupFailed after a failed shutdown."""
    forwarded = profile.forwarded_environment(os.environ if environ is None else environ)
    environment = environment_for(profile)
    host_in, host_out, _ = await connect_pipes()
    worker_out, worker_in = await environment.start()
    inbound = asyncio.create_task(_pump_in(host_in, worker_in, forwarded))
    outbound = asyncio.create_task(_pump_out(worker_out, host_out))
    await asyncio.wait({inbound, outbound}, return_when=asyncio.FIRST_COMPLETED)
    inbound.cancel()
    budget = profile.shutdown_timeout_ms / 1000
    try:
        await environment.close(budget)
    finally:
        await asyncio.gather(inbound, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(outbound, budget)
        host_out.close()
