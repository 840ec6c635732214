"""A stream reader that hands over each frame line as its bytes arrive (spec/schema/worker/frames.schema.json).

A peer that reads lines from a task pays every frame one loop iteration to wake that task before it
can route it. A `FrameReader` is fed by the transport's protocol as any asyncio StreamReader is, but a
listener (`listen`) takes each line inside the callback that delivered its newline, so a small
request is routed in the iteration that read it and its reply can leave one iteration sooner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from enum import Enum
from typing import NoReturn, SupportsIndex

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

from .framing import NEWLINE, FrameOverLimit, check_line, ended_inside, over_limit, reader_limit


class _State(Enum):
    HOLDING = "holding"  # no listener yet: what arrives waits for it
    LISTENING = "listening"
    RELEASED = "released"  # listening has ended: a plain StreamReader from here on


class FrameReader(asyncio.StreamReader):
    """An asyncio StreamReader whose lines a listener takes as they arrive.

    Bytes that arrive before `listen` are held for the listener: the transport reads at most one
    buffer per loop iteration, and a peer listens within the first few, so this holds little. Once
    listening ends (the listener stops, `stop()`, or the input ends), whatever is left is read as
    from any StreamReader, which is how a peer discards the rest of its input.
    """

    def __init__(self, limit: int = WORKER_MAX_FRAME_BYTES) -> None:
        """`limit` is the frame limit in bytes, newline included: a line over it, or one that cannot
        end within it, ends listening with FrameOverLimit."""
        super().__init__(limit=reader_limit(limit))
        self._frame_limit = limit
        self._state = _State.HOLDING
        self._pending = bytearray()
        self._scanned = 0  # the bytes of `_pending` known to hold no newline
        self._ended: tuple[Exception | None] | None = None  # how the transport ended the input
        self._take: Callable[[bytes], bool] = _not_listening
        self._end: Callable[[Exception | None], None] = _not_listening

    def listen(self, take: Callable[[bytes], bool], end: Callable[[Exception | None], None]) -> None:
        """From now on hand each line, newline included, to `take`; it returns False to stop listening.

        `end` is called once if the input ends while listening: with None at a clean end, with a
        MalformedFrame when it ends inside a line or a line is over the limit, or with the
        transport's error. Neither is called again once `take` has returned False or `stop()` ran.
        """
        if self._state is not _State.HOLDING:
            raise RuntimeError("a FrameReader is listened to once")
        self._take, self._end = take, end
        self._state = _State.LISTENING
        self._deliver()
        if self._state is _State.LISTENING and self._ended is not None:
            self._finish(self._ended[0])

    def stop(self) -> None:
        """Stop listening (never from inside `take`, which returns False instead)."""
        if self._state is _State.LISTENING:
            self._release()

    # --- what the transport's protocol calls ---------------------------------------------------

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if self._state is _State.RELEASED:
            super().feed_data(data)
            return
        self._pending.extend(data)
        if self._state is _State.LISTENING:
            self._deliver()

    def feed_eof(self) -> None:
        self._input_ended(None)

    def set_exception(self, exc: Exception) -> None:
        self._input_ended(exc)

    # --- internals -----------------------------------------------------------------------------

    def _deliver(self) -> None:
        pending, start = self._pending, 0
        over: FrameOverLimit | None = None
        with memoryview(pending) as view:  # one copy per line, not two
            while self._state is _State.LISTENING:
                newline = pending.find(NEWLINE, max(start, self._scanned))
                if newline < 0:
                    self._scanned = len(pending)
                    break
                line = bytes(view[start : newline + 1])
                start = newline + 1
                try:
                    check_line(line, self._frame_limit)
                except FrameOverLimit as error:  # whole, but past the limit
                    over = error
                    break
                if not self._take(line):
                    self._state = _State.RELEASED
        del pending[:start]
        self._scanned = max(0, self._scanned - start)
        if self._state is _State.RELEASED:
            self._release()
        elif over is not None:
            self._finish(over)
        elif len(pending) >= self._frame_limit:  # this line cannot end within the limit any more
            pending.clear()
            self._finish(over_limit(self._frame_limit))

    def _input_ended(self, error: Exception | None) -> None:
        if self._state is _State.RELEASED:
            self._end_plainly(error)
            return
        self._ended = (error,)
        if self._state is _State.LISTENING:
            self._finish(error)

    def _finish(self, error: Exception | None) -> None:
        """Listening ends with the input (`error` None: a clean end) or at a line over the limit."""
        if error is None and self._pending:
            error = ended_inside(bytes(self._pending))
            self._pending.clear()
        self._state = _State.RELEASED
        self._end(error)
        self._release()

    def _release(self) -> None:
        self._state = _State.RELEASED
        if self._pending:
            super().feed_data(bytes(self._pending))
            self._pending.clear()
        if self._ended is not None:
            self._end_plainly(self._ended[0])

    def _end_plainly(self, error: Exception | None) -> None:
        if error is None:
            super().feed_eof()
        else:
            super().set_exception(error)


def _not_listening(*_: object) -> NoReturn:
    raise AssertionError("called while not listening")
