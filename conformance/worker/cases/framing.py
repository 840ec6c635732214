"""framing: newline-delimited frames, the size limit, malformed frames, request fields, ids; error strings."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import orjson

from wuu.generated import validators
from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES, WORKER_MAX_ID_BYTES, WORKER_TOOLS
from wuu.worker.client import ConnectionLost

from ...outcomes import CaseSkipped
from ..session import Session, code_of
from ..suite import WORKER
from .cancel import LongRequest, replies_to, start_any_long_request

# ErrorString (errors.schema.json), matched whole: the message holds none of the line terminators of ECMAScript.
ERROR_STRING = re.compile("[a-z][a-z0-9_]*(: [^\n\r\u2028\u2029]*)?")


def _request(s: Session, request_id: Any, method: Any, data: Any = None, **fields: Any) -> dict[str, Any]:
    """A request frame with this connection's token (`fields` add, or replace, frame fields)."""
    frame = {
        "id": request_id,
        "method": method,
        "token": s.client.token,
        "data": {} if data is None else data,
    }
    frame.update(fields)
    return frame


async def _answer(s: Session, method: str, payload: bytes, request_id: str) -> dict[str, Any]:
    """Send hand-made bytes that form the request `request_id`; return its checked reply."""
    waiter = s.client.expect_reply(request_id)
    await s.send_bytes(payload)
    return await s.wait_reply(method, waiter)


async def _frame_answer(s: Session, frame: dict[str, Any]) -> dict[str, Any]:
    return await _answer(s, str(frame["method"]), orjson.dumps(frame) + b"\n", str(frame["id"]))


def _received_frames(s: Session) -> list[dict[str, Any]]:
    """Every frame received, decoded; fails on one that is not a JSON object on one line."""
    frames = []
    for line in s.received():
        s.expect(line.endswith(b"\n"), f"the adapter's output ended inside a frame: {line[:200]!r}")
        s.expect(line.count(b"\n") == 1, f"a frame spans several lines: {line[:200]!r}")
        try:
            frame = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            s.expect(False, f"the adapter sent a line that is not JSON ({error}): {line[:200]!r}")
        s.expect(isinstance(frame, dict), f"the adapter sent a frame that is not an object: {line[:200]!r}")
        frames.append(frame)
    return frames


def _sent_ids(s: Session) -> set[str]:
    """The ids of the well-formed requests sent so far."""
    ids = set()
    for direction, data in s.client.transcript.entries:
        if direction != ">":
            continue
        try:
            frame = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(frame, dict) and isinstance(frame.get("id"), str) and "method" in frame:
            ids.add(frame["id"])
    return ids


async def _long_request(s: Session) -> LongRequest | None:
    """A request in flight when the malformed frame arrives, when the adapter can run one."""
    try:
        return await start_any_long_request(s, "in-flight")
    except CaseSkipped:
        return None


async def _malformed(
    s: Session, payload: bytes, what: str, bad_id: str | None = None, *, initialized: bool = False
) -> None:
    """Send a malformed frame with a long request in flight: no reply to it, the request drained, the end.

    Checks that the adapter exits, that every reply names a request sent before, at most once,
    that the long request's terminal reply, if one came, is `cancelled`, and (where the root is on this
    machine) that cleanup ran: the root, bound with remove_workspace_on_exit, is gone.
    """
    if not initialized:
        await s.initialize(remove_workspace_on_exit=True)
    cleanup_visible = not initialized and s.root.is_dir()
    slow = await _long_request(s)
    sent = _sent_ids(s)
    with contextlib.suppress(ConnectionLost):  # the adapter may stop reading inside the frame
        await s.client.send_bytes(payload)
    await s.expect_exit(f"a frame that is {what}")
    await s.client.close(budget=s.timeout)  # the rest of the adapter's output, up to EOF
    if cleanup_visible:
        s.expect(not s.root.exists(), f"after a frame that is {what}, the adapter exited without its cleanup")
    answered: dict[str, int] = {}
    for frame in _received_frames(s):
        if "id" not in frame or "method" in frame:
            continue  # a notification or a callback, not a reply
        reply_id = frame["id"]
        s.expect(reply_id != bad_id, f"the adapter answered the frame that is {what}: {frame}")
        s.expect(reply_id in sent, f"the adapter answered a request it was not sent: {frame}")
        answered[reply_id] = answered.get(reply_id, 0) + 1
        s.expect(answered[reply_id] == 1, f"the request {reply_id!r} got a second reply: {frame}")
    if slow is not None:
        for frame in replies_to(s, slow.id):
            s.expect(
                code_of(frame) == "cancelled",
                f"the {slow.method} in flight when the connection ended must end with cancelled "
                f"(or get no reply); it answered {frame}",
            )


# --- lines and sizes ---------------------------------------------------------------------------------


@WORKER.case("framing.newline-delimited")
async def newline_delimited(s: Session) -> None:
    """Frames are JSON lines: two in one write, one split across writes, and spaced JSON are all read;
    every frame received is one JSON object on one line, an id holding a newline included."""
    await s.initialize()
    first, second = _request(s, "two-a", "process/list"), _request(s, "two-b", "process/list")
    waiters = [s.client.expect_reply("two-a"), s.client.expect_reply("two-b")]
    await s.send_bytes(orjson.dumps(first) + b"\n" + orjson.dumps(second) + b"\n")
    for waiter in waiters:
        reply = await s.wait_reply("process/list", waiter)
        s.expect("data" in reply, f"a request sent in the same write as another failed: {reply}")
    split = orjson.dumps(_request(s, "split", "process/list")) + b"\n"
    waiter = s.client.expect_reply("split")
    for start in range(0, len(split), 7):
        await s.send_bytes(split[start : start + 7])
    reply = await s.wait_reply("process/list", waiter)
    s.expect("data" in reply, f"a request split across writes failed: {reply}")
    spaced = json.dumps(_request(s, "spaced", "process/list"), indent=None, separators=(" , ", " : "))
    reply = await _answer(s, "process/list", b" " + spaced.encode() + b" \n", "spaced")
    s.expect("data" in reply, f"a request with spaces between its JSON tokens failed: {reply}")
    reply = await s.request("process/list", {}, request_id="line\nbreak\u2028")
    s.expect("data" in reply, f"a request whose id holds a newline failed: {reply}")
    _received_frames(s)


@WORKER.case("framing.max-frame-accepted")
async def max_frame_accepted(s: Session) -> None:
    """A request of exactly 16 MiB, newline included, is read and answered, and the connection goes on.

    The request is a write_file whose content fills the frame; written, it holds every byte.
    """
    await s.initialize()
    frame = _request(s, "max", "execute", s.tool("write_file", {"path": "max.txt", "content": ""}))
    size = len(orjson.dumps(frame)) + 1
    content = "a" * (WORKER_MAX_FRAME_BYTES - size)
    frame["data"] = s.tool("write_file", {"path": "max.txt", "content": content})
    payload = orjson.dumps(frame) + b"\n"
    s.expect(len(payload) == WORKER_MAX_FRAME_BYTES, f"the suite built a frame of {len(payload)} bytes")
    reply = await _answer(s, "execute", payload, "max")
    if "data" in reply and not reply["data"]["is_error"]:
        written = (reply["data"].get("metadata") or {}).get("bytes_written", len(content))
        s.expect(written == len(content), f"write_file wrote {written} of the {len(content)} bytes sent")
    await s.ok("process/list", {})


@WORKER.case("framing.reply-too-large")
async def reply_too_large(s: Session) -> None:
    """A reply over 16 MiB is replaced by reply_too_large: 8 MiB of byte 0x01 read back would encode
    as ~48 MiB (`\\u0001`). The file is built by write_file, then edit_file with replace_all."""
    await s.initialize()
    reply = await s.execute("write_file", path="controls.txt", content="A" * (1 << 20))
    if code_of(reply) == "unsupported_tool":
        s.skip("the adapter does not provide write_file")
    s.expect("data" in reply and not reply["data"]["is_error"], f"write_file failed: {reply}")
    reply = await s.execute(
        "edit_file", path="controls.txt", old_string="A", new_string="\x01" * 8, replace_all=True
    )
    if code_of(reply) == "unsupported_tool":
        s.skip("the adapter does not provide edit_file")
    s.expect("data" in reply and not reply["data"]["is_error"], f"edit_file failed: {reply}")
    reply = await s.execute("read_file", path="controls.txt", max_bytes=8 << 20)
    if code_of(reply) == "unsupported_tool":
        s.skip("the adapter does not provide read_file")
    s.expect(
        code_of(reply) == "reply_too_large",
        f"reading 8 MiB of control bytes (a reply of about 48 MiB) must fail with reply_too_large; "
        f"it answered {str(reply)[:300]}",
    )
    await s.ok("process/list", {})


# --- malformed frames --------------------------------------------------------------------------------


@WORKER.case("framing.malformed-not-json", "framing.malformed-drains-handlers")
async def malformed_not_json(s: Session) -> None:
    """A line that is not JSON (a request cut short) gets no reply, and the adapter drains and exits."""
    frame = orjson.dumps(_request(s, "not-json", "process/list"))
    await _malformed(s, frame[:-1] + b"\n", "not JSON", "not-json")


@WORKER.case("framing.malformed-not-object", "framing.malformed-drains-handlers")
async def malformed_not_object(s: Session) -> None:
    """A JSON array holding a request gets no reply, and the adapter drains and exits."""
    frame = orjson.dumps([_request(s, "not-object", "process/list")])
    await _malformed(s, frame + b"\n", "a JSON array", "not-object")


@WORKER.case("framing.malformed-invalid-utf8", "framing.malformed-drains-handlers")
async def malformed_invalid_utf8(s: Session) -> None:
    """A request whose bytes are not UTF-8 (0xFF inside a string) gets no reply; the adapter exits."""
    frame = orjson.dumps(_request(s, "bad-utf8", "execute", s.tool("read_file", {"path": "MARK"})))
    await _malformed(s, frame.replace(b"MARK", b"a\xff\xfeb") + b"\n", "not UTF-8", "bad-utf8")


@WORKER.case("framing.malformed-no-id", "framing.malformed-drains-handlers")
async def malformed_no_id(s: Session) -> None:
    """A request without an id gets no reply, and the adapter drains and exits."""
    frame = _request(s, None, "process/list")
    del frame["id"]
    await _malformed(s, orjson.dumps(frame) + b"\n", "a request without an id")


@WORKER.case("framing.malformed-no-id", "framing.malformed-drains-handlers")
async def malformed_numeric_id(s: Session) -> None:
    """A request whose id is a number, not a string, gets no reply, and the adapter drains and exits."""
    frame = _request(s, 7, "process/list")
    await _malformed(s, orjson.dumps(frame) + b"\n", "a request with a numeric id")


@WORKER.case("framing.malformed-bad-method", "framing.malformed-drains-handlers")
async def malformed_bad_method(s: Session) -> None:
    """A frame whose method is a number gets no reply, and the adapter drains and exits."""
    frame = _request(s, "bad-method", 42)
    await _malformed(s, orjson.dumps(frame) + b"\n", "a frame whose method is a number", "bad-method")


@WORKER.case("framing.malformed-bad-id", "framing.malformed-drains-handlers")
async def malformed_empty_id(s: Session) -> None:
    """A request whose id is empty gets no reply, and the adapter drains and exits."""
    frame = _request(s, "", "process/list")
    await _malformed(s, orjson.dumps(frame) + b"\n", "a request with an empty id", "")


@WORKER.case("framing.malformed-bad-id", "framing.malformed-drains-handlers")
async def malformed_long_id(s: Session) -> None:
    """An id of 256 UTF-8 bytes (85 three-byte characters and one more) is answered; one of 258 bytes in
    86 characters gets no reply, and the adapter drains and exits."""
    await s.initialize()
    longest = "€" * 85 + "a"
    s.expect(len(longest.encode()) == WORKER_MAX_ID_BYTES, "the suite built a wrong id")
    reply = await s.request("process/list", {}, request_id=longest)
    s.expect("data" in reply, f"a request whose id has {WORKER_MAX_ID_BYTES} UTF-8 bytes failed: {reply}")
    too_long = "€" * 86
    frame = _request(s, too_long, "process/list")
    await _malformed(
        s, orjson.dumps(frame) + b"\n", "a request with an id of 258 UTF-8 bytes", too_long, initialized=True
    )


@WORKER.case("framing.malformed-oversize", "framing.malformed-drains-handlers")
async def malformed_oversize(s: Session) -> None:
    """A request of 16 MiB + 1 byte, newline included, gets no reply, and the adapter drains and exits."""
    frame = _request(s, "oversize", "execute", s.tool("write_file", {"path": "big.txt", "content": ""}))
    size = len(orjson.dumps(frame)) + 1
    content = "a" * (WORKER_MAX_FRAME_BYTES + 1 - size)
    frame["data"] = s.tool("write_file", {"path": "big.txt", "content": content})
    payload = orjson.dumps(frame) + b"\n"
    s.expect(len(payload) == WORKER_MAX_FRAME_BYTES + 1, f"the suite built a frame of {len(payload)} bytes")
    await _malformed(s, payload, f"{len(payload)} bytes long", "oversize")


# --- request fields and ids ----------------------------------------------------------------------------


@WORKER.case("framing.request-fields")
async def request_fields(s: Session) -> None:
    """A request with a string id and method but a wrong token, data or extra field gets invalid_request,
    and the connection goes on."""
    await s.initialize()
    wrong = [
        ("a numeric token", _request(s, "token-number", "process/list", token=5)),
        ("no token", {"id": "token-missing", "method": "process/list", "data": {}}),
        ("a null token", _request(s, "token-null", "process/list", token=None)),
        ("no data", {"id": "data-missing", "method": "process/list", "token": s.client.token}),
        ("an array as data", _request(s, "data-array", "process/list", data=[])),
        ("a string as data", _request(s, "data-string", "process/list", data="{}")),
        ("null data", {"id": "data-null", "method": "process/list", "token": s.client.token, "data": None}),
        ("an extra field", _request(s, "extra-field", "process/list", extra=1)),
        ("a parent field", _request(s, "parent-field", "process/list", parent="x")),
    ]
    for what, frame in wrong:
        reply = await _frame_answer(s, frame)
        s.expect(
            code_of(reply) == "invalid_request",
            f"a request with {what} must get invalid_request; it answered {reply}",
        )
    await s.ok("process/list", {})


@WORKER.case("framing.duplicate-id")
async def duplicate_id(s: Session) -> None:
    """A request reusing the id of one in flight gets invalid_request; the first is still in flight and
    gets its own one terminal reply; after that the id may be used again."""
    await s.initialize()
    slow = await start_any_long_request(s, "dup")
    duplicate = s.client.expect_reply("dup")  # the reply to the duplicate takes over the id's slot
    await s.client.send_frame(_request(s, "dup", "process/list"))
    reply = await s.wait_reply("process/list", duplicate)
    s.expect(
        code_of(reply) == "invalid_request",
        f"a request reusing the id of a request in flight must get invalid_request; it answered {reply}",
    )
    terminal = s.client.expect_reply("dup")
    result = await s.ok("cancel", {"id": "dup"})
    s.expect(
        result == {"cancelled": True},
        f"the first request with the id was no longer in flight after the duplicate (cancel: {result})",
    )
    reply = await s.wait_reply(slow.method, terminal)
    s.expect(code_of(reply) == "cancelled", f"the first request's terminal reply is {reply}")
    reply = await s.request("process/list", {}, request_id="dup")
    s.expect("data" in reply, f"reusing an id after its request's terminal reply failed: {reply}")


# --- errors ----------------------------------------------------------------------------------------------


@WORKER.case("errors.format")
async def error_format(s: Session) -> None:
    """Errors of many kinds are `code` or `code: message`, with the code the situation calls for."""
    seen: dict[str, str] = {}

    async def expect_error(method: str, data: dict[str, Any], code: str, **kwargs: Any) -> None:
        error = await s.error(method, data, code, **kwargs)
        s.expect(
            ERROR_STRING.fullmatch(error) is not None,
            f"the error {error!r} of {method} is not `code` or `code: message`",
        )
        seen[code] = error

    await expect_error("process/list", {}, "not_initialized")
    await expect_error("initialize", s.binding(version=3), "protocol_mismatch")
    await s.initialize()
    await expect_error("process/list", {}, "token_mismatch", token="another-token")
    await expect_error("initialize", s.binding(session="another-thread"), "binding_immutable")
    await expect_error("no/such/method", {}, "unsupported_method")
    await expect_error("process/get", {}, "invalid_request")
    await expect_error("process/get", {"id": "no-such-process"}, "not_found")
    await expect_error("execute", s.tool("no_such_tool", {}), "unsupported_tool")
    if code_of(await s.execute("read_file", path="probe")) != "unsupported_tool":
        await expect_error("execute", s.tool("read_file", {"path": "../outside"}), "path_outside_root")
        await expect_error("execute", s.tool("read_file", {"path": "missing.txt"}), "not_found")
        # A message that quotes the path must replace its line terminators (every kind) by spaces.
        line_breaks = "missing\n1\r2\r\n3\u2028 4\u2029.txt"
        await expect_error("execute", s.tool("read_file", {"path": line_breaks}), "not_found")
    if code_of(await s.execute("write_file", "read_only", path="x.txt", content="")) != "unsupported_tool":
        await expect_error(
            "execute",
            s.tool("write_file", {"path": "x.txt", "content": ""}, "read_only"),
            "permission_denied",
        )
    s.expect(len(seen) >= 8, f"only {len(seen)} kinds of error were seen: {sorted(seen)}")


@WORKER.case("errors.replies-follow-schema")
async def replies_follow_schema(s: Session) -> None:
    """The results of every method the adapter serves, and each tool's metadata, follow their schemas."""
    await s.initialize(capabilities=["process.start.v1"])
    await s.ok("process/list", {})
    await s.ok("cancel", {"id": "nothing"})
    try:
        mode: str | None = await s.command_mode()
    except CaseSkipped:
        mode = None
    tools: dict[str, dict[str, Any]] = {}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "dir/file.txt", "content": "one\ntwo\n", "create_dirs": True}),
        ("edit_file", {"path": "dir/file.txt", "old_string": "two", "new_string": "three"}),
        ("edit_file", {"path": "dir/file.txt", "old_string": "absent", "new_string": "x"}),
        ("read_file", {"path": "dir/file.txt", "offset_bytes": 1, "max_bytes": 4}),
        ("list_dir", {"path": ".", "depth": 2}),
        ("exec_command", {"argv": ["echo", "hi"]}),
        ("exec_command", {"argv": ["false"]}),
    ]
    for tool, arguments in calls:
        if tool == "exec_command" and mode is None:
            continue
        reply = await s.execute(tool, mode if mode and tool == "exec_command" else "standard", **arguments)
        if code_of(reply) == "unsupported_tool":
            continue
        s.expect("data" in reply, f"{tool} {arguments} failed: {reply}")
        tools[tool] = reply["data"]
        metadata = reply["data"].get("metadata")
        if metadata is not None and not (tool == "edit_file" and reply["data"]["is_error"]):
            name = WORKER_TOOLS[tool].metadata.__name__
            problems = validators.errors(name, metadata)
            s.expect(not problems, f"the metadata of {tool} does not follow {name}: {problems[:1]}")
    if mode is not None and "process/start" in s.methods:
        record = await s.ok(
            "process/start", {"argv": ["echo", "out"], "permission_mode": mode, "operation_id": "op-1"}
        )
        await s.ok("process/get", {"id": record["id"]})
        await s.ok("process/read", {"Process": record["id"], "Wait": 5 * 10**9})

        async def ended() -> bool:
            status = (await s.ok("process/get", {"id": record["id"]}))["status"]
            return bool(status != "running")

        await s.until(ended, "the `echo` process to end")
        await s.ok("process/read", {"Process": record["id"], "OffsetBytes": 0})
        await s.ok("process/stop", {"id": record["id"]})
        await s.ok("process/list", {})
        if "process/write" in s.methods:
            cat = await s.ok("process/start", {"argv": ["cat"], "permission_mode": mode, "stdin": True})
            await s.ok("process/write", {"id": cat["id"], "data": "aGkK", "close": True})
            await s.ok("process/stop", {"id": cat["id"], "signal": "KILL"})
    if "export/open" in s.methods and "write_file" in tools:
        snapshot = await s.ok("export/open", {"path": "dir/file.txt"})
        await s.ok("export/read", {"token": snapshot["token"], "offset": 0, "max_bytes": 3})
        await s.ok("export/read", {"token": snapshot["token"], "offset": snapshot["size"]})
        await s.ok("export/close", {"token": snapshot["token"]})
