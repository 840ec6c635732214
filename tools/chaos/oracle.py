"""What the spec says a worker does with one host-to-worker frame (spec/schema/worker/frames.schema.json).

`judge` reads the frame's bytes the way the spec's rules are written, independently of the worker's code:
a frame that is over the size limit, not UTF-8, not a JSON object, of a kind whose string `id` or `method`
it lacks, or whose `id` is not a FrameId, ends the connection unanswered; a request gets exactly one reply;
a reply the worker never asked for is ignored. JSON that RFC 8259 admits but that parsers refuse (numbers
past a double's range, lone surrogates, very deep nesting) may go either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES, WORKER_MAX_ID_BYTES


class Expect(Enum):
    """What the worker does with a frame."""

    ANSWER = "answer"  # exactly one reply with the frame's id
    ENDS = "ends"  # no reply; the connection ends
    IGNORED = "ignored"  # no reply; the connection goes on
    EITHER = "either"  # a parser's limit: ANSWER (when `id` is set) or IGNORED, or the connection ends


@dataclass(frozen=True)
class Verdict:
    """The expectation for one frame, the id a reply must carry (ANSWER, EITHER) and why."""

    expect: Expect
    why: str
    id: str | None = None


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _strict_json(text: str) -> Any:
    """RFC 8259 JSON: Python's parser without the NaN/Infinity extension."""
    return json.loads(text, parse_constant=_no_constants)


def _is_frame_id(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        return len(value.encode()) <= WORKER_MAX_ID_BYTES
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 reply could echo it
        return False


def _judge_object(value: Any) -> Verdict:
    if not isinstance(value, dict):
        return Verdict(Expect.ENDS, f"not a JSON object but {type(value).__name__}")
    method = value.get("method")
    if "method" in value and not isinstance(method, str):
        return Verdict(Expect.ENDS, "method is not a string")
    frame_id = value.get("id")
    if "token" in value or "parent" in value:  # a request or a callback request: both need id and method
        if method is None:
            return Verdict(Expect.ENDS, "a request without a method")
        if not _is_frame_id(frame_id):
            return Verdict(Expect.ENDS, "a request whose id is not a FrameId")
        return Verdict(Expect.ANSWER, "a request", frame_id)
    if method is not None:
        if "id" not in value:
            return Verdict(Expect.ENDS, "a notification (a host sends none)")
        if not _is_frame_id(frame_id):
            return Verdict(Expect.ENDS, "a request whose id is not a FrameId")
        return Verdict(Expect.ANSWER, "a request without a token", frame_id)
    if not _is_frame_id(frame_id):
        return Verdict(Expect.ENDS, "a reply whose id is not a FrameId")
    return Verdict(Expect.IGNORED, "a reply to no request in flight")


def judge(data: bytes, limit: int = WORKER_MAX_FRAME_BYTES) -> Verdict:
    """The spec's expectation for the frame `data` (one line, its newline included)."""
    if len(data) > limit:
        return Verdict(Expect.ENDS, f"{len(data)} bytes is over the frame limit")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return Verdict(Expect.ENDS, "not UTF-8")
    try:
        value = _strict_json(text)
    except (ValueError, RecursionError):
        strict_ok = False
    else:
        strict_ok = True
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        fast_ok = False
    else:
        fast_ok = True
    if not strict_ok and not fast_ok:
        return Verdict(Expect.ENDS, "not JSON")
    if not strict_ok:  # accepted by one parser only: never ours to require either outcome
        return Verdict(Expect.EITHER, "JSON only one parser reads")
    verdict = _judge_object(value)
    if fast_ok or verdict.expect is Expect.ENDS:
        return verdict
    return Verdict(Expect.EITHER, f"{verdict.why}, in JSON past a parser's limits", verdict.id)
