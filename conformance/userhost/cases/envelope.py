"""Cases of the JSON-RPC envelope (spec/schema/userhost/envelope.schema.json): what gets `parse_error` and
`invalid_request`, with which id; ids echoed exactly; client notifications; duplicate ids in flight; the
frame limit; the order of the checks; absent params.

Malformed messages are written by hand (`send_bytes`), so that the host sees exactly the bytes meant.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from typing import Any

from wuu.generated import validators
from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES, USERHOST_PROTOCOL_VERSION

from ...outcomes import CaseFailed
from ..connection import Connection, Message, RequestId, code_of, field_of
from ..session import HostSession, initialize_params
from ..suite import USERHOST

MAX_ID = 2**53 - 1
"""The largest integer id (JsonRpcIntegerId)."""
PING = ("plugin/client/cancel", {"id": "conformance-nothing"})
"""A request every initialized connection answers at once, with `{"cancelled": false}`."""
DUPLICATE = "(one of two requests with one id)"
"""The method a case's pending response is registered under when two requests share its id."""
MIB = 1024 * 1024
SLOW_ATTACHMENT_BYTES = 16 * MIB
"""The attachment of the slow request of `duplicate_in_flight_id`: the reference host keeps a send of 16 MiB in
flight for about 0.3 s. The gap matters: the second answer to one id must arrive after the case has
registered for it again."""
DUPLICATE_ATTEMPTS = 3


def line(message: Any) -> bytes:
    """One message as the line a client writes."""
    return json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"


def padded(message: Message, size: int) -> bytes:
    """`message` as one line of exactly `size` bytes, newline included (JSON whitespace pads it)."""
    text = json.dumps(message).encode("utf-8")
    return text[:-1] + b" " * (size - len(text) - 1) + b"}\n"


async def unchecked(
    host: HostSession, waiter: asyncio.Future[Message], what: str, *, on: Connection | None = None
) -> Message:
    """The response `waiter` gets, not yet checked against the spec (a caller may tell answers apart
    first); an error response with a null id instead fails the case."""
    nulls = asyncio.ensure_future((on or host.main).null_responses.get())
    try:
        done, _ = await asyncio.wait(
            {asyncio.shield(waiter), nulls}, timeout=host.timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        nulls.cancel()
    if not done:
        raise CaseFailed(f"no response to {what} within {host.timeout:g} s")
    try:
        message = done.pop().result()
    except EOFError:
        raise CaseFailed(f"the host closed the connection before answering {what}") from None
    host.expect(
        message.get("id") is not None,
        f"the host answered {what} with a null id (its id is usable): {message.get('error')}",
    )
    return message


async def answered(
    host: HostSession, message: Message, what: str, *, on: Connection | None = None
) -> Message:
    """Send a hand-made message that has a usable id; its checked response."""
    connection = on or host.main
    method = message.get("method")
    waiter = connection.expect(
        message["id"], method if isinstance(method, str) else "", message.get("params")
    )
    await connection.send(message)
    response = await unchecked(host, waiter, what, on=connection)
    host.check()
    return response


async def null_answer(host: HostSession, data: bytes, what: str, *, on: Connection | None = None) -> Message:
    """Write `data`; the error response with a null id it must get."""
    connection = on or host.main
    await connection.send_bytes(data)
    deadline = asyncio.get_running_loop().time() + host.timeout
    while True:
        # A response that breaks the spec (say, one that echoes an unusable id) fails the case at once.
        host.check()
        try:
            message = await asyncio.wait_for(connection.null_responses.get(), 0.05)
        except TimeoutError:
            if connection.closed.is_set():
                raise CaseFailed(f"the host closed the connection instead of answering {what}") from None
            if asyncio.get_running_loop().time() > deadline:
                raise CaseFailed(
                    f"no error response with a null id to {what} within {host.timeout:g} s"
                ) from None
            continue
        host.check()
        return message


async def goes_on(host: HostSession, on: Connection | None = None) -> None:
    """The connection still answers requests (it is initialized)."""
    result = await host.ok(*PING, on=on)
    host.expect(result == {"cancelled": False}, f"{PING[0]} answered {result}")


# --- parse_error and invalid_request ------------------------------------------------------------

NOT_JSON_OBJECTS = {
    "text that is not JSON": b"{nope\n",
    "an empty line": b"\n",
    "a JSON number": b"3\n",
    "a JSON string": b'"initialize"\n',
    "JSON null": b"null\n",
    "JSON true": b"true\n",
    "an object cut short": b'{"jsonrpc":"2.0","id":1,"method":"initialize"\n',
}


@USERHOST.case("envelope.parse-error")
async def parse_error(host: HostSession) -> None:
    """Lines that are not UTF-8 JSON objects (not JSON, an empty line, a number, a string, null, true, an
    object cut short, and an initialize whose client name holds invalid UTF-8) each get parse_error with a
    null id, before and after initialize; none is run (initialize then succeeds) and the connection goes on."""
    # Were the line decoded leniently, it would be a valid initialize (and answered with id 1).
    bad_utf8 = (
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":%d,'
        % USERHOST_PROTOCOL_VERSION
        + b'"client_info":{"name":"wuu-\xff\xfe","version":"1"}}}\n'
    )
    lines = {**NOT_JSON_OBJECTS, "an initialize holding invalid UTF-8": bad_utf8}
    for what, data in lines.items():
        message = await null_answer(host, data, what)
        host.expect_error(message, "parse_error", what)
    await host.initialize()
    for what, data in lines.items():
        message = await null_answer(host, data, f"{what}, after initialize")
        host.expect_error(message, "parse_error", what)
    await goes_on(host)


def _request(**fields: Any) -> Message:
    """An initialize request with id 7, with fields replaced."""
    return {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": initialize_params(), **fields}


def _without(name: str) -> Message:
    """An initialize request with id 7 and without one of its members."""
    message = _request()
    del message[name]
    return message


# Messages whose id is usable: the response must echo it.
INVALID_WITH_ID: dict[str, Message] = {
    "no jsonrpc": _without("jsonrpc"),
    'jsonrpc "1.0"': _request(jsonrpc="1.0"),
    "jsonrpc the number 2.0": _request(jsonrpc=2.0),
    "no method": _without("method"),
    "a method that is a number": _request(method=5),
    "an empty method": _request(method=""),
    "a method of 129 characters": _request(method="m" * 129),
    "params that are an array": _request(params=[initialize_params()]),
    "params that are a string": _request(params="initialize"),
    "an unknown member": _request(extra=1),
}
# Messages without a usable id: the response's id must be null.
INVALID_WITHOUT_ID: dict[str, Any] = {
    "no id and no method": {"jsonrpc": "2.0", "params": {}},
    "a null id": _request(id=None),
    "an empty string id": _request(id=""),
    "an id of 257 characters": _request(id="i" * 257),
    "a float id": _request(id=1.5),
    "the id true": _request(id=True),
    "the id false": _request(id=False),
    "an object id": _request(id={"n": 7}),
    "an array id": _request(id=[7]),
    "the id 2^53": _request(id=MAX_ID + 1),
    "the id -2^53": _request(id=-MAX_ID - 1),
    "a batch of one initialize": [_request()],
    "an empty batch": [],
}


@USERHOST.case("envelope.invalid-request")
async def invalid_request(host: HostSession) -> None:
    """Malformed initialize requests get invalid_request: with their id 7 when it is usable (no or a wrong
    jsonrpc, no, a non-string, an empty or a 129-character method, params that are not an object, an unknown
    member), with a null id otherwise (no id, null, "", 257 characters, 1.5, booleans, an object, an array,
    ±2^53, a batch). None is run: initialize succeeds afterwards, and the same messages are refused after it."""
    for what, message in INVALID_WITH_ID.items():
        response = await answered(host, message, what)
        host.expect_error(response, "invalid_request", what)
    for what, value in INVALID_WITHOUT_ID.items():
        response = await null_answer(host, line(value), what)
        host.expect_error(response, "invalid_request", what)
    await host.initialize()
    for what, message in INVALID_WITH_ID.items():
        response = await answered(host, message, f"{what}, after initialize")
        host.expect_error(response, "invalid_request", f"{what}, after initialize")
    for what, value in INVALID_WITHOUT_ID.items():
        response = await null_answer(host, line(value), f"{what}, after initialize")
        host.expect_error(response, "invalid_request", f"{what}, after initialize")
    await goes_on(host)


# --- ids -------------------------------------------------------------------------------------------

LEGAL_IDS: list[RequestId] = [0, 1, -1, MAX_ID, -MAX_ID, "0", "a", "x" * 256, "é✓🙂", 'q"\\\n\t\u0000/']


@USERHOST.case("envelope.ids-echoed")
async def ids_echoed(host: HostSession) -> None:
    """Every legal id (0, ±1, ±(2^53-1), "0", "a", 256 characters, non-ASCII, escapes) comes back with the
    same value and JSON type, before and after initialize; 7 and "7" in one write get their own answers."""
    for request_id in LEGAL_IDS:
        await host.error("shutdown", {}, "not_initialized", request_id=request_id)
    await host.initialize()
    for request_id in LEGAL_IDS:
        response = await host.request(*PING, request_id=request_id)
        host.expect(
            "result" in response, f"the request with id {request_id!r} failed: {response.get('error')}"
        )
    # One unsupported, one served: were "7" and 7 the same id, one answer would be missing or misplaced.
    main = host.main
    integer = main.expect(7, "no/such/method", {})
    string = main.expect("7", *PING)
    await main.send_bytes(
        line({"jsonrpc": "2.0", "id": 7, "method": "no/such/method", "params": {}})
        + line({"jsonrpc": "2.0", "id": "7", "method": PING[0], "params": PING[1]})
    )
    host.expect_error(await host.response(integer, "no/such/method (id 7)"), "unsupported_method", "id 7")
    answer = await host.response(string, f'{PING[0]} (id "7")')
    host.expect("result" in answer, f'the request with id "7" failed: {answer.get("error")}')


@USERHOST.case("envelope.notifications-unanswered")
async def notifications_unanswered(host: HostSession) -> None:
    """Client notifications (initialize, an unknown method, shutdown, a cancel with bad params, no params)
    get no answer and are not run: initialize afterwards succeeds, and after a shutdown notification the
    connection still answers."""
    before = [
        {"jsonrpc": "2.0", "method": "initialize", "params": initialize_params()},
        {"jsonrpc": "2.0", "method": "no/such/method"},
        {"jsonrpc": "2.0", "method": "plugin/client/invalidate", "params": {}},
    ]
    await host.main.send_bytes(b"".join(line(message) for message in before))
    await host.initialize()
    after = [
        {"jsonrpc": "2.0", "method": "shutdown", "params": {}},
        {"jsonrpc": "2.0", "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "plugin/client/cancel", "params": {"id": []}},
        {"jsonrpc": "2.0", "method": "initialize", "params": initialize_params()},
    ]
    await host.main.send_bytes(b"".join(line(message) for message in after))
    await goes_on(host)
    # Any answer to a notification (it has no id) would have come before the answer to the later request.
    answers = host.main.null_responses
    host.expect(
        answers.empty(),
        f"the host answered a notification: {None if answers.empty() else answers.get_nowait()}",
    )


# --- duplicate ids -------------------------------------------------------------------------------


def _attachment(size: int) -> dict[str, Any]:
    data = bytes(size)
    return {
        "filename": "in-flight.bin",
        "media_type": "application/octet-stream",
        "size": size,
        "sha256": hashlib.sha256(data).hexdigest(),
        "data": base64.b64encode(data).decode("ascii"),
    }


def _is_receipt(response: Message) -> bool:
    result = response.get("result")
    inner = result.get("result") if isinstance(result, dict) else None
    return isinstance(inner, dict) and "receipt" in inner


@USERHOST.case("envelope.duplicate-in-flight-id")
async def duplicate_in_flight_id(host: HostSession) -> None:
    """In one write, a slow durable `agents.send` (a 16 MiB attachment) and a cancel with the
    same id: while the send is in flight the cancel gets invalid_request with that id, the send still gets
    its receipt, and then the id is free again. A host that answers the cancel with a success while the send
    is unanswered fails. When the send is answered first no overlap was seen: the case tries again, and skips
    when none overlaps."""
    await host.initialize()
    host.personal()
    session_id = await host.main_session()
    main = host.main
    attachment = _attachment(SLOW_ATTACHMENT_BYTES)
    for attempt in range(DUPLICATE_ATTEMPTS):
        request_id = f"in-flight-{attempt}"
        user_input = {
            "client_input_id": f"in-flight-input-{attempt}",
            "request_id": f"in-flight-request-{attempt}",
            "text": "a duplicate id in flight",
            "attachments": [attachment],
        }
        send = host.plugin_params("agents.send", {"session_id": session_id}, user_input=user_input)
        # Both responses carry the same id, so they are taken in the order they arrive and told apart by
        # their content; the method name below is none of the catalog's, so neither is checked on arrival.
        first = main.expect(request_id, DUPLICATE)
        second = main.expect(request_id, DUPLICATE)
        await main.send_bytes(
            line({"jsonrpc": "2.0", "id": request_id, "method": "plugin/client/request", "params": send})
            + line({"jsonrpc": "2.0", "id": request_id, "method": PING[0], "params": PING[1]})
        )
        answer = await unchecked(host, first, f"the two requests with id {request_id!r}")
        later = await unchecked(host, second, f"the second response to id {request_id!r}")
        host.check()
        host.without_receipts(answer)
        host.without_receipts(later)
        if _is_receipt(answer):
            continue  # the send finished before the second line was read: nothing overlapped
        host.expect(
            code_of(answer) == "invalid_request",
            f"while agents.send with id {request_id!r} was in flight, a second request with that id got "
            f"{answer.get('error') or answer.get('result')}; it must get invalid_request",
        )
        host.expect(_is_receipt(later), f"agents.send with a duplicate after it got {later.get('error')}")
        problems = validators.errors("AgentsSendResult", later["result"]["result"])
        host.expect(
            not problems, f"the result of agents.send does not follow AgentsSendResult: {problems[:1]}"
        )
        await goes_on(host)
        again = await host.request(*PING, request_id=request_id)
        host.expect(
            "result" in again, f"once answered, the id {request_id!r} is not free: {again.get('error')}"
        )
        return
    host.skip(f"agents.send was answered before the next line was read in {DUPLICATE_ATTEMPTS} attempts")


# --- the frame limit -----------------------------------------------------------------------------


@USERHOST.case("envelope.oversize-line")
async def oversize_line(host: HostSession) -> None:
    """An initialize line of max_frame_bytes + 1 bytes gets parse_error with a null id and is not run; the
    initialize on the next line of the same write is read and succeeds. After initialize, a line twice the
    limit gets parse_error too and the connection goes on."""
    over = padded(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()},
        USERHOST_MAX_FRAME_BYTES + 1,
    )
    following = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": initialize_params()}
    waiter = host.main.expect(2, "initialize", following["params"])
    message = await null_answer(
        host, over + line(following), f"a line of {USERHOST_MAX_FRAME_BYTES + 1} bytes"
    )
    host.expect_error(message, "parse_error", "a line over max_frame_bytes")
    response = await host.response(waiter, "the initialize after the over-limit line")
    host.expect(
        "result" in response, f"the initialize after the over-limit line failed: {response.get('error')}"
    )
    twice = padded(
        {"jsonrpc": "2.0", "id": 3, "method": PING[0], "params": PING[1]}, 2 * USERHOST_MAX_FRAME_BYTES
    )
    message = await null_answer(host, twice, f"a line of {2 * USERHOST_MAX_FRAME_BYTES} bytes")
    host.expect_error(message, "parse_error", "a line of twice max_frame_bytes")
    await goes_on(host)


@USERHOST.case("envelope.max-frame-accepted")
async def max_frame_accepted(host: HostSession) -> None:
    """An initialize line of exactly max_frame_bytes bytes (newline included, padded with JSON whitespace)
    succeeds, and so does a cancel of that size after it."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
    waiter = host.main.expect(1, "initialize", request["params"])
    await host.main.send_bytes(padded(request, USERHOST_MAX_FRAME_BYTES))
    response = await host.response(waiter, f"an initialize of {USERHOST_MAX_FRAME_BYTES} bytes")
    host.expect("result" in response, f"an initialize of max_frame_bytes failed: {response.get('error')}")
    ping = {"jsonrpc": "2.0", "id": 2, "method": PING[0], "params": PING[1]}
    waiter = host.main.expect(2, *PING)
    await host.main.send_bytes(padded(ping, USERHOST_MAX_FRAME_BYTES))
    response = await host.response(waiter, f"a cancel of {USERHOST_MAX_FRAME_BYTES} bytes")
    host.expect("result" in response, f"a cancel of max_frame_bytes failed: {response.get('error')}")


# --- the order of the checks and absent params ------------------------------------------------------


@USERHOST.case("envelope.check-order")
async def check_order(host: HostSession) -> None:
    """The first failing check answers: a wrong jsonrpc or array params with an unserved method get
    invalid_request; an unserved method with bad params before initialize gets unsupported_method; a served
    method with bad params before initialize gets not_initialized; after initialize an unserved method with
    bad params gets unsupported_method and a served one invalid_params."""
    for what, message in {
        'jsonrpc "1.0" and an unserved method': {
            "jsonrpc": "1.0",
            "id": 1,
            "method": "thread/start",
            "params": {},
        },
        "array params and an unserved method": {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "thread/start",
            "params": [1],
        },
    }.items():
        host.expect_error(await answered(host, message, what), "invalid_request", what)
    await host.error("thread/start", {"bogus": True}, "unsupported_method")
    await host.error("shutdown", {"bogus": True}, "not_initialized")
    await host.error("plugin/client/cancel", {"id": []}, "not_initialized")
    await host.initialize()
    message = {"jsonrpc": "1.0", "id": 3, "method": PING[0], "params": {"id": []}}
    host.expect_error(
        await answered(host, message, 'jsonrpc "1.0" and bad params'), "invalid_request", "jsonrpc 1.0"
    )
    await host.error("thread/start", {"bogus": True}, "unsupported_method")
    await host.error("plugin/client/cancel", {"id": []}, "invalid_params")


@USERHOST.case("envelope.absent-params")
async def absent_params(host: HostSession) -> None:
    """A request without params gets what the same request with params {} gets: initialize and cancel
    invalid_params naming the same field, shutdown not_initialized before initialize, and after it
    shutdown succeeds with {}."""
    bare = await host.request("initialize")
    empty = await host.request("initialize", {})
    host.expect_error(bare, "invalid_params", "initialize without params")
    host.expect(
        field_of(bare) == field_of(empty),
        f"initialize without params names {field_of(bare)!r}; with params {{}} it names {field_of(empty)!r}",
    )
    await host.error("shutdown", None, "not_initialized")
    await host.initialize()
    bare = await host.request(PING[0])
    empty = await host.request(PING[0], {})
    host.expect_error(bare, "invalid_params", f"{PING[0]} without params")
    host.expect(
        field_of(bare) == field_of(empty),
        f"{PING[0]} without params names {field_of(bare)!r}; with params {{}} it names {field_of(empty)!r}",
    )
    result = await host.ok("shutdown")
    host.expect(result == {}, f"shutdown without params answered {result}")
