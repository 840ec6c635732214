"""Newline-delimited JSON frames (spec/schema/worker/frames.schema.json).

A frame is one UTF-8 JSON object on one line, at most `WORKER_MAX_FRAME_BYTES` bytes including
its newline. `Framing` is the codec every reader and writer of the worker protocol uses (the SDK's
serving connection, the host client, the conformance suite): reading gives one line or raises
`MalformedFrame`, encoding refuses an oversize frame before any byte of it is sent, so a peer never
sees half a frame.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

NEWLINE = b"\n"
SKIP_CHUNK = 64 * 1024
Frame = dict[str, Any]


class MalformedFrame(Exception):
    """The peer sent something that is not a frame; the connection ends without a reply.

    `data` holds the bytes of the broken frame when they were read (not for an oversize one).
    """

    def __init__(self, message: str, data: bytes = b"") -> None:
        super().__init__(message)
        self.data = data


class FrameOverLimit(MalformedFrame):
    """An incoming line is over the frame limit. `rest_unread` is True when the rest of it, through its
    newline, is still in the stream (`skip_line` discards it without holding it in memory)."""

    def __init__(self, message: str, rest_unread: bool) -> None:
        super().__init__(message)
        self.rest_unread = rest_unread


class FrameTooLarge(Exception):
    """An outgoing frame would exceed the size limit."""


class OutputClosed(Exception):
    """The peer no longer reads our frames."""


def ended_inside(partial: bytes) -> MalformedFrame:
    """The error of an input that ended inside a frame, after `partial`."""
    return MalformedFrame(f"input ended inside a frame ({len(partial)} bytes)", partial)


def over_limit(limit: int) -> FrameOverLimit:
    """The error of a line that outgrew the frame limit before its newline arrived."""
    return FrameOverLimit(f"frame over the limit of {limit} bytes", rest_unread=True)


def check_line(line: bytes, limit: int) -> None:
    """FrameOverLimit if a whole line (newline included) is over `limit`."""
    if len(line) > limit:
        raise FrameOverLimit(f"frame of {len(line)} bytes is over the limit of {limit}", rest_unread=False)


def encode(frame: Frame, limit: int = WORKER_MAX_FRAME_BYTES) -> bytes:
    """The frame's bytes, newline included; FrameTooLarge when they exceed `limit`."""
    data = orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)  # no second copy to add the newline
    if len(data) > limit:
        raise FrameTooLarge(f"{len(data)} bytes is over the frame limit of {limit}")
    return data


def decode(line: bytes) -> Frame:
    """One frame line (newline stripped or not) as a JSON object; MalformedFrame otherwise."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        # orjson rejects invalid UTF-8 with the same error, which is what the protocol wants.
        raise MalformedFrame(f"not a JSON object: {error}", line) from None
    if not isinstance(value, dict):
        raise MalformedFrame(f"not a JSON object but {type(value).__name__}", line)
    return value


def reader_limit(limit: int = WORKER_MAX_FRAME_BYTES) -> int:
    """The asyncio StreamReader limit that admits exactly the frames of `limit` bytes.

    asyncio's limit bounds the bytes before the separator, so a frame of `limit` bytes
    (newline included) needs `limit - 1`.
    """
    return limit - 1


class Framing:
    """The frame codec of one connection: how lines are read, and how frames become bytes and back.

    Every reader checks the limit itself, so a stream created with a larger buffer limit still
    refuses a frame one byte over it.
    """

    def __init__(self, limit: int = WORKER_MAX_FRAME_BYTES) -> None:
        self.limit = limit

    @property
    def stream_limit(self) -> int:
        """The buffer limit for an asyncio StreamReader that carries these frames."""
        return reader_limit(self.limit)

    async def read_line(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next frame's line, newline included; None at a clean end of input (EOF between frames)."""
        try:
            line = await reader.readuntil(NEWLINE)
        except asyncio.IncompleteReadError as error:
            if error.partial:
                raise ended_inside(error.partial) from None
            return None
        except asyncio.LimitOverrunError:
            raise over_limit(self.limit) from None
        check_line(line, self.limit)
        return line

    @staticmethod
    async def skip_line(reader: asyncio.StreamReader) -> None:
        """Discard the stream through its next newline (or to its end) as it arrives.

        What the reader has buffered is taken out a small chunk at a time: taking it in one piece would
        copy up to a frame limit's worth beside the buffer, doubling what an over-limit line holds.
        """
        while True:
            try:
                await reader.readuntil(NEWLINE)
                return
            except asyncio.LimitOverrunError as error:
                for offset in range(0, error.consumed, SKIP_CHUNK):
                    await reader.readexactly(min(SKIP_CHUNK, error.consumed - offset))
            except asyncio.IncompleteReadError:
                return

    def decode(self, line: bytes) -> Frame:
        """One line as a frame object; MalformedFrame when it is not a JSON object."""
        return decode(line)

    def encode(self, frame: Frame) -> bytes:
        """One frame's bytes; FrameTooLarge over the limit."""
        return encode(frame, self.limit)
