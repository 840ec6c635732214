"""The JSON-RPC envelope of the user-host RPC on a Unix socket, byte for byte
(spec/schema/userhost/envelope.schema.json): what is `parse_error` and `invalid_request` (with a null id
when no usable id can be read), which ids are echoed exactly, client notifications going unanswered,
duplicate ids, the frame limit and EOF inside a line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE
from wuu.generated import validators
from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES
from wuu.host.userhost import UnixServer
from wuu.host.userhost.envelope import FRAMING

INIT_PARAMS = {"protocol_version": 1, "client_info": {"name": "t", "version": "1"}}
MAX_ID = 2**53 - 1


class Raw:
    """A client socket that writes bytes as given and reads the host's lines one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: Path) -> Raw:
        return cls(*await asyncio.open_unix_connection(str(path), limit=FRAMING.stream_limit))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_json(self, message: Any) -> None:
        await self.send(json.dumps(message).encode() + b"\n")

    async def line(self) -> bytes:
        """The host's next line, its newline included (b"" at EOF)."""
        return await asyncio.wait_for(self.reader.readline(), DEADLINE)

    async def message(self) -> dict[str, Any]:
        line = await self.line()
        assert line.endswith(b"\n") and line.count(b"\n") == 1, line
        message: dict[str, Any] = json.loads(line)
        validators.validate("JsonRpcMessage", message)
        return message

    async def initialize(self, request_id: int = 0) -> None:
        await self.send_json(
            {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": INIT_PARAMS}
        )
        assert "result" in await self.message()

    def close(self) -> None:
        self.writer.close()


def error_of(message: dict[str, Any], request_id: object, code: str) -> None:
    """`message` is an error response to `request_id` with the stable code `code` and its JSON-RPC number."""
    numbers = {"parse_error": -32700, "invalid_request": -32600}
    assert "result" not in message, message
    assert message["id"] == request_id and type(message["id"]) is type(request_id), message
    assert message["error"]["data"]["code"] == code, message
    assert message["error"]["code"] == numbers.get(code, message["error"]["code"]), message


@pytest.fixture
async def raw(server: UnixServer) -> AsyncIterator[Raw]:
    """A raw client of the host's socket."""
    client = await Raw.open(server.path)
    yield client
    client.close()


async def still_answers(raw: Raw, request_id: int = 99) -> None:
    """The connection goes on: a next request gets its own answer."""
    await raw.send_json(
        {"jsonrpc": "2.0", "id": request_id, "method": "plugin/client/cancel", "params": {"id": 1}}
    )
    message = await raw.message()
    assert message["id"] == request_id, message


@pytest.mark.parametrize(
    "line",
    [
        b"{nope\n",
        b"\n",
        b"3\n",
        b'"text"\n',
        b"null\n",
        b"true\n",
        b'{"jsonrpc":"2.0","id":1,"method":"initialize"\n',
    ],
    ids=["not-json", "empty-line", "number", "string", "null", "bool", "truncated-object"],
)
async def test_not_a_json_object_is_parse_error_with_null_id(raw: Raw, line: bytes) -> None:
    await raw.initialize()
    await raw.send(line)
    error_of(await raw.message(), None, "parse_error")
    await still_answers(raw)


async def test_invalid_utf8_is_parse_error(raw: Raw) -> None:
    await raw.initialize()
    await raw.send(b'{"jsonrpc":"2.0","id":1,"method":"plugin/client/cancel","params":{"id":"\xff\xfe"}}\n')
    error_of(await raw.message(), None, "parse_error")
    await still_answers(raw)


@pytest.mark.parametrize(
    "batch", [[], [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS}]]
)
async def test_a_batch_is_invalid_request_with_null_id(raw: Raw, batch: list[Any]) -> None:
    await raw.send_json(batch)
    error_of(await raw.message(), None, "invalid_request")
    # The batch's request was not run: the connection can still initialize.
    await raw.initialize()


@pytest.mark.parametrize(
    "request_id",
    [1.5, 1.0, True, False, None, {}, {"a": 1}, [], [1], "", "x" * 257, MAX_ID + 1, -MAX_ID - 1],
    ids=[
        "float",
        "integral-float",
        "true",
        "false",
        "null",
        "empty-object",
        "object",
        "empty-array",
        "array",
        "empty-string",
        "string-257",
        "over-2^53-1",
        "under-minus-2^53-1",
    ],
)
async def test_a_malformed_id_is_invalid_request_with_null_id(raw: Raw, request_id: object) -> None:
    await raw.send_json({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": INIT_PARAMS})
    error_of(await raw.message(), None, "invalid_request")
    await raw.initialize()  # nothing was run


async def test_missing_id_and_method_is_invalid_request_with_null_id(raw: Raw) -> None:
    await raw.send_json({"jsonrpc": "2.0", "params": {}})
    error_of(await raw.message(), None, "invalid_request")


@pytest.mark.parametrize(
    "message",
    [
        {"id": 7, "method": "initialize", "params": INIT_PARAMS},
        {"jsonrpc": "1.0", "id": 7, "method": "initialize", "params": INIT_PARAMS},
        {"jsonrpc": 2.0, "id": 7, "method": "initialize", "params": INIT_PARAMS},
        {"jsonrpc": "2.0", "id": 7, "params": INIT_PARAMS},
        {"jsonrpc": "2.0", "id": 7, "method": 5, "params": INIT_PARAMS},
        {"jsonrpc": "2.0", "id": 7, "method": None, "params": INIT_PARAMS},
        {"jsonrpc": "2.0", "id": 7, "method": "", "params": INIT_PARAMS},
        {"jsonrpc": "2.0", "id": 7, "method": "m" * 129, "params": INIT_PARAMS},
        {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": [INIT_PARAMS]},
        {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": INIT_PARAMS, "extra": 1},
    ],
    ids=[
        "no-jsonrpc",
        "jsonrpc-1.0",
        "jsonrpc-number",
        "no-method",
        "method-number",
        "method-null",
        "method-empty",
        "method-129",
        "params-array",
        "unknown-member",
    ],
)
async def test_a_malformed_request_is_invalid_request_with_its_id(raw: Raw, message: dict[str, Any]) -> None:
    await raw.send_json(message)
    error_of(await raw.message(), 7, "invalid_request")
    await raw.initialize()  # nothing was run


@pytest.mark.parametrize(
    "request_id",
    [0, 1, -1, MAX_ID, -MAX_ID, "0", "a", "é✓🙂", 'q"\\\n\t\u0000/', "x" * 256],
    ids=[
        "zero",
        "one",
        "minus-one",
        "max",
        "min",
        "string-zero",
        "ascii",
        "unicode",
        "escaped",
        "string-256",
    ],
)
async def test_every_legal_id_is_echoed_exactly(raw: Raw, request_id: str | int) -> None:
    await raw.initialize(request_id=12345)
    request = {"jsonrpc": "2.0", "id": request_id, "method": "plugin/client/cancel", "params": {"id": 1}}
    await raw.send_json(request)
    line = await raw.line()
    message = json.loads(line)
    assert message == {"jsonrpc": "2.0", "id": request_id, "result": {"cancelled": False}}
    assert type(message["id"]) is type(request_id)
    if isinstance(request_id, int):
        # An integer id comes back as the same integer literal, never a float or a string.
        assert b'"id":%d,' % request_id in line, line


async def test_a_string_id_and_an_integer_id_are_different_ids(raw: Raw) -> None:
    await raw.initialize()
    await raw.send_json({"jsonrpc": "2.0", "id": 7, "method": "nope", "params": {}})
    await raw.send_json({"jsonrpc": "2.0", "id": "7", "method": "nope", "params": {}})
    first, second = await raw.message(), await raw.message()
    assert (first["id"], second["id"]) == (7, "7")


async def test_a_client_notification_gets_no_response(raw: Raw) -> None:
    # A notification naming initialize: were it run, the request after it would get already_initialized.
    await raw.send_json({"jsonrpc": "2.0", "method": "initialize", "params": INIT_PARAMS})
    await raw.send_json({"jsonrpc": "2.0", "method": "no/such/method"})
    await raw.send_json({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS})
    message = await raw.message()
    assert message["id"] == 1 and "result" in message, message


async def test_a_duplicate_id_in_flight_is_invalid_request_and_the_first_completes(raw: Raw) -> None:
    await raw.initialize()
    slow = {
        "plugin_id": "wuu.test",
        "method": "agents.history.search",
        "params": {"session_id": "main", "query": "sleep:1"},
    }
    quick = {"plugin_id": "wuu.test", "method": "agents.main_session", "params": {}}
    # One write: the second line is read while the first request is in flight.
    await raw.send(
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": "plugin/client/request", "params": slow}).encode()
        + b"\n"
        + json.dumps({"jsonrpc": "2.0", "id": 5, "method": "plugin/client/request", "params": quick}).encode()
        + b"\n"
    )
    error_of(await raw.message(), 5, "invalid_request")
    assert await raw.message() == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {"result": {"messages": [], "next_page_token": None}},
    }
    # Once answered, the id is free again.
    await raw.send_json({"jsonrpc": "2.0", "id": 5, "method": "plugin/client/request", "params": quick})
    assert await raw.message() == {"jsonrpc": "2.0", "id": 5, "result": {"result": {"session_id": "main"}}}


async def test_the_same_id_on_two_connections_is_two_requests(raw: Raw, server: UnixServer) -> None:
    other = await Raw.open(server.path)
    try:
        await raw.initialize()
        await other.initialize()
        slow = {
            "plugin_id": "wuu.test",
            "method": "agents.history.search",
            "params": {"session_id": "main", "query": "sleep:0.5"},
        }
        quick = {"plugin_id": "wuu.test", "method": "agents.main_session", "params": {}}
        await raw.send_json({"jsonrpc": "2.0", "id": 5, "method": "plugin/client/request", "params": slow})
        await other.send_json({"jsonrpc": "2.0", "id": 5, "method": "plugin/client/request", "params": quick})
        assert await other.message() == {
            "jsonrpc": "2.0",
            "id": 5,
            "result": {"result": {"session_id": "main"}},
        }
        assert await raw.message() == {
            "jsonrpc": "2.0",
            "id": 5,
            "result": {"result": {"messages": [], "next_page_token": None}},
        }
    finally:
        other.close()


def padded(message: dict[str, Any], size: int) -> bytes:
    """`message` as one line of exactly `size` bytes, newline included (JSON whitespace pads it)."""
    text = json.dumps(message).encode()
    return text[:-1] + b" " * (size - len(text) - 1) + b"}\n"


async def test_the_frame_limit_is_exact_and_an_over_limit_line_does_not_end_the_connection(raw: Raw) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS}
    # One byte over: parse_error with a null id, and the line is skipped as a whole.
    await raw.send(padded(request, USERHOST_MAX_FRAME_BYTES + 1))
    error_of(await raw.message(), None, "parse_error")
    # Exactly at the limit: an ordinary request.
    await raw.send(padded(request, USERHOST_MAX_FRAME_BYTES))
    message = await raw.message()
    assert message["id"] == 1 and message["result"]["user_space_id"] == "local", message
    # Far over the limit (twice the frame), then a request on the same write.
    await raw.send(b"[" + b" " * (2 * USERHOST_MAX_FRAME_BYTES) + b"]\n")
    error_of(await raw.message(), None, "parse_error")
    await still_answers(raw)


async def test_eof_inside_a_line_is_parse_error_then_the_connection_ends(raw: Raw) -> None:
    await raw.initialize()
    await raw.send(b'{"jsonrpc":"2.0","id":3,"method":"plugin/client/cancel","params":{"id":1}}')
    raw.writer.write_eof()
    error_of(await raw.message(), None, "parse_error")
    assert await raw.line() == b""
