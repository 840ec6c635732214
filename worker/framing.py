"""Newline-delimited JSON frames (spec/schema/worker/frames.schema.json).

A frame is one UTF-8 JSON object on one line, at most `WORKER_MAX_FRAME_BYTES` bytes including
its newline. Reading yields decoded objects or raises `MalformedFrame`; writing refuses an
oversize frame before any byte of it is sent, so a peer never sees half a frame.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

NEWLINE = b"\n"


class MalformedFrame(Exception):
    """The peer sent something that is not a frame; the connection ends without a reply."""


class FrameTooLarge(Exception):
    """An outgoing frame would exceed the size limit."""


class OutputClosed(Exception):
    """The peer no longer reads our frames."""


def encode(frame: dict[str, Any], limit: int = WORKER_MAX_FRAME_BYTES) -> bytes:
    """The frame's bytes, newline included; FrameTooLarge when they exceed `limit`."""
    data = orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)  # no second copy to add the newline
    if len(data) > limit:
        raise FrameTooLarge(f"{len(data)} bytes is over the frame limit of {limit}")
    return data


def decode(line: bytes) -> dict[str, Any]:
    """One frame line (newline stripped or not) as a JSON object; MalformedFrame otherwise."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        # orjson rejects invalid UTF-8 with the same error, which is what the protocol wants.
        raise MalformedFrame(f"not a JSON object: {error}") from None
    if not isinstance(value, dict):
        raise MalformedFrame(f"not a JSON object but {type(value).__name__}")
    return value


class FrameReader:
    """Reads frames from a stream whose buffer limit is the frame limit."""

    def __init__(self, reader: asyncio.StreamReader, limit: int = WORKER_MAX_FRAME_BYTES) -> None:
        self._reader = reader
        self._limit = limit

    async def read(self) -> dict[str, Any] | None:
        """The next frame, or None at a clean end of input (EOF between frames)."""
        try:
            line = await self._reader.readuntil(NEWLINE)
        except asyncio.IncompleteReadError as error:
            if error.partial:
                raise MalformedFrame(f"input ended inside a frame ({len(error.partial)} bytes)") from None
            return None
        except asyncio.LimitOverrunError:
            raise MalformedFrame(f"frame over the limit of {self._limit} bytes") from None
        if len(line) > self._limit:
            raise MalformedFrame(f"frame of {len(line)} bytes is over the limit of {self._limit}")
        return decode(line)


def reader_limit(limit: int = WORKER_MAX_FRAME_BYTES) -> int:
    """The asyncio StreamReader limit that admits exactly the frames of `limit` bytes.

    asyncio's limit bounds the bytes before the separator, so a frame of `limit` bytes
    (newline included) needs `limit - 1`.
    """
    return limit - 1


class FrameWriter:
    """Writes whole frames to a stream; OutputClosed once the peer stops reading."""

    def __init__(self, writer: asyncio.StreamWriter, limit: int = WORKER_MAX_FRAME_BYTES) -> None:
        self._writer = writer
        self.limit = limit

    async def write_bytes(self, data: bytes) -> None:
        """Send an already encoded frame (from `encode`)."""
        if self._writer.is_closing():
            raise OutputClosed("the output is closed")
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as error:
            raise OutputClosed(str(error)) from None

    async def write(self, frame: dict[str, Any]) -> None:
        """Encode and send one frame; FrameTooLarge leaves the output untouched."""
        await self.write_bytes(encode(frame, self.limit))

    def close(self) -> None:
        self._writer.close()
