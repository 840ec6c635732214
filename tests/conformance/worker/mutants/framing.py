"""Mutants of framing and errors: newline-delimited frames, the size limit, malformed frames, request fields,
ids, oversize replies, error strings and result schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES, WORKER_MAX_ID_BYTES
from wuu.generated.models import ErrorCode

from . import mutant
from .harness import Frame, Relay, ReplyRewriter, code_of, exit_now, frame_of, malformed, rewrite_results

REQUEST_KEYS = ("id", "method", "token", "data")


class LineFilter(Relay):
    """A relay that drops the host's lines for which `skip` holds, and keeps serving."""

    def skip(self, line: bytes) -> bool:
        raise NotImplementedError

    def from_host(self, line: bytes) -> None:
        if not self.skip(line):
            self.to_worker(line)


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


@mutant(
    "multi-line-frames", "writes every frame pretty-printed over several lines", "framing.newline-delimited"
)
class MultiLineFrames(Relay):
    """Every frame from the worker is re-encoded with indentation, so one frame spans several lines."""

    def from_worker(self, line: bytes) -> None:
        self.to_host(orjson.dumps(orjson.loads(line), option=orjson.OPT_INDENT_2) + b"\n")


@mutant(
    "skips-non-json-lines",
    "ignores a UTF-8 line that is not JSON and keeps serving",
    "framing.malformed-not-json",
)
class SkipsNonJsonLines(LineFilter):
    """Valid UTF-8 lines that do not parse as JSON are dropped instead of ending the connection."""

    def skip(self, line: bytes) -> bool:
        return line.endswith(b"\n") and _utf8(line) and not _json(line)


@mutant(
    "skips-non-object-frames",
    "ignores a JSON value that is not an object and keeps serving",
    "framing.malformed-not-object",
)
class SkipsNonObjectFrames(LineFilter):
    """Lines holding JSON arrays, strings, numbers, ... are dropped instead of ending the connection."""

    def skip(self, line: bytes) -> bool:
        return line.endswith(b"\n") and _json(line) and frame_of(line) is None


@mutant(
    "skips-invalid-utf8",
    "ignores a line that is not UTF-8 and keeps serving",
    "framing.malformed-invalid-utf8",
)
class SkipsInvalidUtf8(LineFilter):
    """Lines that are not UTF-8 are dropped instead of ending the connection."""

    def skip(self, line: bytes) -> bool:
        return line.endswith(b"\n") and not _utf8(line)


@mutant(
    "ignores-frames-without-id",
    "ignores a request without a string id and keeps serving",
    "framing.malformed-no-id",
)
class IgnoresFramesWithoutId(LineFilter):
    """A frame whose `id` is missing or not a string is dropped instead of ending the connection."""

    def skip(self, line: bytes) -> bool:
        frame = frame_of(line)
        return frame is not None and not isinstance(frame.get("id"), str)


@mutant(
    "answers-non-string-method",
    "answers a frame whose method is not a string with invalid_request and keeps serving",
    "framing.malformed-bad-method",
)
class AnswersNonStringMethod(Relay):
    """A request frame whose `method` is not a string gets an `invalid_request` reply; the connection goes on."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if (
            frame is not None
            and isinstance(frame.get("id"), str)
            and frame["id"]
            and "method" in frame
            and not isinstance(frame["method"], str)
        ):
            self.answer(
                {"id": frame["id"], "error": f"{ErrorCode.INVALID_REQUEST.value}: method: not a string"}
            )
            return
        self.to_worker(line)


@mutant(
    "answers-bad-ids",
    "answers a request whose id is empty or over 256 bytes with invalid_request and keeps serving",
    "framing.malformed-bad-id",
)
class AnswersBadIds(Relay):
    """A frame with an empty or overlong string id gets an `invalid_request` reply; the connection goes on."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        frame_id = frame.get("id") if frame is not None else None
        if isinstance(frame_id, str) and (not frame_id or len(frame_id.encode()) > WORKER_MAX_ID_BYTES):
            self.answer(
                {"id": frame_id, "error": f"{ErrorCode.INVALID_REQUEST.value}: id: empty or too long"}
            )
            return
        self.to_worker(line)


def _shortened(value: Any, excess: int) -> tuple[Any, int]:
    """`value` with its longest strings cut until `excess` characters are gone; what is left to cut."""
    if isinstance(value, str):
        cut = min(excess, len(value))
        return value[: len(value) - cut], excess - cut
    if isinstance(value, dict):
        result = {}
        for key, item in sorted(value.items(), key=lambda kv: -len(orjson.dumps(kv[1]))):
            result[key], excess = _shortened(item, excess)
        return {key: result[key] for key in value}, excess
    if isinstance(value, list):
        items = []
        for item in value:
            item, excess = _shortened(item, excess)
            items.append(item)
        return items, excess
    return value, excess


@mutant(
    "accepts-oversize-frames",
    "reads and answers a frame one byte over the 16 MiB limit",
    "framing.malformed-oversize",
)
class AcceptsOversizeFrames(Relay):
    """A frame over the limit is served: its longest strings are cut until it fits, and the worker answers it."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if len(line) > WORKER_MAX_FRAME_BYTES and frame is not None:
            fitted, _ = _shortened(frame, len(line) - WORKER_MAX_FRAME_BYTES + 16)
            line = orjson.dumps(fitted) + b"\n"
        self.to_worker(line)


@mutant(
    "rejects-max-size-frames",
    "treats a frame of exactly 16 MiB (newline included) as oversize",
    "framing.max-frame-accepted",
)
class RejectsMaxSizeFrames(Relay):
    """A frame of exactly the limit reaches the worker one byte longer, so the worker ends the connection."""

    def from_host(self, line: bytes) -> None:
        if len(line) == WORKER_MAX_FRAME_BYTES:
            line = line[:-1] + b" \n"
        self.to_worker(line)


@mutant(
    "exits-without-draining",
    "on a malformed frame exits at once: no handler is cancelled or drained, no cleanup runs",
    "framing.malformed-drains-handlers",
)
class ExitsWithoutDraining(Relay):
    """At a malformed frame the process exits on the spot, leaving in-flight work as it is.

    What it leaks (commands of in-flight requests, background processes) is killed 15 s later.
    """

    def from_host(self, line: bytes) -> None:
        if malformed(line):
            exit_now()
        self.to_worker(line)


@mutant(
    "accepts-unknown-frame-fields",
    "ignores unknown fields of a request frame instead of answering invalid_request",
    "framing.request-fields",
)
class AcceptsUnknownFrameFields(Relay):
    """Fields of a request frame other than id, method, token and data are dropped before it is checked."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and "method" in frame and set(frame) - set(REQUEST_KEYS):
            line = orjson.dumps({key: frame[key] for key in REQUEST_KEYS if key in frame}) + b"\n"
        self.to_worker(line)


@mutant(
    "accepts-duplicate-ids",
    "serves a request whose id is still in flight instead of answering invalid_request",
    "framing.duplicate-id",
)
class AcceptsDuplicateIds(Relay):
    """A request whose id is still in flight reaches the worker under another id, and its reply goes back
    under the duplicate id: both requests are served."""

    def __init__(self) -> None:
        super().__init__()
        self._renamed: dict[str, str] = {}
        self._in_flight: set[str] = set()

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and isinstance(frame.get("id"), str) and "method" in frame:
            frame_id = frame["id"]
            if frame_id in self._in_flight:
                alias = f"{frame_id}#again{len(self._renamed)}"
                self._renamed[alias] = frame_id
                line = orjson.dumps({**frame, "id": alias}) + b"\n"
            else:
                self._in_flight.add(frame_id)
        self.to_worker(line)

    def from_worker(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and "method" not in frame and isinstance(frame.get("id"), str):
            original = self._renamed.pop(frame["id"], None)
            if original is not None:
                self.answer({**frame, "id": original})
                return
            self._in_flight.discard(frame["id"])
        self.to_host(line)


@mutant(
    "sends-oversize-replies",
    "sends a reply over 16 MiB instead of replacing it with reply_too_large",
    "framing.reply-too-large",
)
class SendsOversizeReplies(ReplyRewriter):
    """A read_file that the worker answers `reply_too_large` is answered again by reading the file here,
    and the whole oversize reply goes out."""

    def __init__(self) -> None:
        super().__init__()
        self._root = Path("/")

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        data = frame.get("data") if frame is not None else None
        if frame is not None and frame.get("method") == "initialize" and isinstance(data, dict):
            self._root = Path(str(data.get("root", "/")))
        self.to_worker(line)

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method != "execute" or data.get("tool") != "read_file" or code_of(reply) != "reply_too_large":
            return [reply]
        arguments = orjson.loads(data["call"]["arguments"])
        with open(self._root / arguments["path"], "rb") as handle:
            handle.seek(arguments.get("offset_bytes", 0))
            content = handle.read(arguments.get("max_bytes", WORKER_MAX_FRAME_BYTES))
        return [
            {"id": reply["id"], "data": {"output": content.decode("utf-8", "replace"), "is_error": False}}
        ]


@mutant(
    "unknown-error-code",
    "answers not_found with a code the spec does not define (no_such_entry)",
    "errors.format",
)
class UnknownErrorCode(ReplyRewriter):
    """Every `not_found` error reply goes out as `no_such_entry: ...`."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if code_of(reply) == ErrorCode.NOT_FOUND.value:
            reply = {"id": reply["id"], "error": "no_such_entry" + reply["error"][len("not_found") :]}
        return [reply]


def _count_processes(result: Frame, request: Frame) -> None:
    result["count"] = len(result.get("processes", []))


mutant(
    "list-result-extra-field",
    "adds a field that ProcessListResult does not define to process/list results",
    "errors.replies-follow-schema",
)(rewrite_results("process/list", _count_processes, doc="The process/list result carries an extra `count`."))
