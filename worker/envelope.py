"""The worker protocol's rules for whole frames (spec/schema/worker/frames.schema.json), for the peer core.

A frame's id is a FrameId: a non-empty string of at most `WORKER_MAX_ID_BYTES` bytes. A frame with `token`
or `parent` is a request (the kinds are told apart by their keys), so one without a method is malformed
rather than a reply. A reply over the frame limit is replaced by the error `reply_too_large`. Each end
numbers its own requests with a prefix of its own (request ids are scoped per direction).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from wuu.generated.catalog import WORKER_MAX_ID_BYTES
from wuu.generated.plain import ErrorCode

from .framing import Frame, FrameTooLarge, Framing, MalformedFrame
from .peer import Envelope


def frame_id(value: object) -> str:
    """`value` as a FrameId (a non-empty string of at most 256 bytes); else MalformedFrame, saying why."""
    if not isinstance(value, str) or not value:
        raise MalformedFrame("no string id")
    if len(value.encode()) > WORKER_MAX_ID_BYTES:
        raise MalformedFrame(f"id over {WORKER_MAX_ID_BYTES} bytes")
    return value


def reply_too_large(reply: Frame, error: FrameTooLarge) -> Frame:
    """The error reply sent instead of a reply over the frame limit."""
    return {"id": reply["id"], "error": f"{ErrorCode.REPLY_TOO_LARGE.value}: {error}"}


def request_ids(prefix: str) -> Iterator[str]:
    """The ids of one end's requests on one connection: `prefix` and a count from 1."""
    return (f"{prefix}{n}" for n in itertools.count(1))


WORKER_ENVELOPE: Envelope[str] = Envelope(
    framing=Framing(),
    frame_id=frame_id,
    request_keys=frozenset({"token", "parent"}),
    reply_too_large=reply_too_large,
)
"""The worker protocol's frames: at most `WORKER_MAX_FRAME_BYTES`, FrameId ids, `token` and `parent` only
on requests, `reply_too_large` for a reply over the limit."""
