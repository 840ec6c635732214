"""The relay between a host and a worker that sits in the middle of a connection without being either end.

`wuu-host adapter` relays the host's stdio to a worker in an execution environment with this module (the
persistent worker's `attach`, which only passes bytes on to a worker that judges every frame itself, is a
plain byte relay of its own: `wuu.worker.native.daemon`). The frames are those of
spec/schema/worker/frames.schema.json:

- host -> worker, frame by frame: a line of at most `WORKER_MAX_FRAME_BYTES` bytes, newline included.
  An optional callback rewrites the `data` of `initialize` requests (the adapter's binding interceptor);
  every other line goes on byte for byte, and so does a line that is not a JSON object, since judging
  malformed frames is the worker's job, not the relay's. A line over the limit ends this direction: no
  worker may accept it, and the relay could not tell where the next frame starts. An unterminated last
  line is passed on at EOF, for the worker to judge.
- worker -> host: bytes, as they come.

When the host's direction ends, the worker's input is half-closed: the worker sees EOF while its
replies to requests in flight still come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

from .framing import NEWLINE, MalformedFrame, decode

InitializeRewrite = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Given the `data` of an `initialize` request, the data to send instead, or None to send the frame as
it came. It is called for every initialize, so equal requests stay equal after the rewrite."""

_CHUNK = 1 << 20


def rewrite_initialize_frame(line: bytes, rewrite: InitializeRewrite) -> bytes:
    """`line` with its initialize data rewritten; any other line, or a malformed one, as it is."""
    # Only a line with the method name in it can be an initialize request. A JSON string can hide a
    # letter of it only behind a \u escape, so a line with neither is never decoded.
    if b'"initialize"' not in line and b"\\u" not in line:
        return line
    try:
        frame = decode(line)
    except MalformedFrame:
        return line
    data = frame.get("data")
    if frame.get("method") != "initialize" or not isinstance(data, dict):
        return line  # a reply, another request, or initialize params the worker refuses itself
    rewritten = rewrite(data)
    if rewritten is None:
        return line
    return orjson.dumps({**frame, "data": rewritten}, option=orjson.OPT_APPEND_NEWLINE)


async def frames_to_worker(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    rewrite_initialize: InitializeRewrite | None = None,
    limit: int = WORKER_MAX_FRAME_BYTES,
) -> None:
    """Relay the host's frames to the worker until the host's EOF, a line over `limit`, or a broken stream;
    then half-close the worker's input. `reader`'s own buffer limit must admit a line of `limit` bytes."""
    try:
        while True:
            try:
                line = await reader.readuntil(NEWLINE)
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    writer.write(error.partial)
                    await writer.drain()
                return
            except asyncio.LimitOverrunError:
                return
            if len(line) > limit:
                return  # a reader with a larger buffer still relays no frame over the protocol's limit
            if rewrite_initialize is not None:
                line = rewrite_initialize_frame(line, rewrite_initialize)
            writer.write(line)
            await writer.drain()
    except ConnectionError:
        pass  # either side went away: the worker's end is closed below, the host's by its owner
    finally:
        with contextlib.suppress(OSError):  # the worker's side may be gone already
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()


async def bytes_to_host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Relay the worker's output to the host, as it comes, until the worker's EOF or a broken stream.
    The host's stream stays open: its owner closes it."""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()


class Relay:
    """Both directions between a host's streams and a worker's, each a task of its own."""

    def __init__(
        self,
        host: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        worker: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        rewrite_initialize: InitializeRewrite | None = None,
    ) -> None:
        """Start relaying; `host` and `worker` are each (what it sends, what it receives)."""
        # Held for as long as the relay: a StreamWriter that is collected closes its transport, which
        # would end the other direction too once this one is half-closed.
        self.host, self.worker = host, worker
        host_reader, host_writer = host
        worker_reader, worker_writer = worker
        self.to_worker = asyncio.create_task(frames_to_worker(host_reader, worker_writer, rewrite_initialize))
        self.to_host = asyncio.create_task(bytes_to_host(worker_reader, host_writer))

    async def either_ended(self, stop: asyncio.Event | None = None) -> None:
        """Return once one direction has ended (the host's input, or the worker's output), or `stop` is set."""
        waits: set[asyncio.Future[Any]] = {self.to_worker, self.to_host}
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        if stopped is not None:
            waits.add(stopped)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopped is not None:
                stopped.cancel()

    def end_input(self) -> None:
        """Stop relaying the host's frames: the worker's input is half-closed (if it is not already)."""
        self.to_worker.cancel()

    async def finish(self, timeout: float | None = None) -> None:
        """Wait up to `timeout` seconds (None: without a bound) for the worker's output to end, then stop
        both directions; raise what either failed with."""
        await asyncio.wait({self.to_host}, timeout=timeout)
        for task in (self.to_host, self.to_worker):
            task.cancel()
        await asyncio.wait({self.to_host, self.to_worker})
        for task in (self.to_host, self.to_worker):
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
