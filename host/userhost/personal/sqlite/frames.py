"""The frames between the store and its writer process (`writer.py`): a 4-byte big-endian length, then a
pickle."""

from __future__ import annotations

import os
import select
import struct

HEADER = struct.Struct(">I")
"""A frame's length, ahead of its pickle."""


class Frames:
    """The frames of a file descriptor, read in large chunks."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._ended = False

    def next(self, wait: bool) -> bytes | None:
        """The next whole frame; None at the end of the input, or when `wait` is false and none has fully
        arrived yet."""
        while True:
            if len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= HEADER.size + size:
                    frame = bytes(self._buffer[HEADER.size : HEADER.size + size])
                    del self._buffer[: HEADER.size + size]
                    return frame
            if self._ended or (not wait and not select.select([self._fd], [], [], 0)[0]):
                return None
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                self._ended = True
            self._buffer += chunk
