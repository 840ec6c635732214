"""One client connection of the user-host suite: NDJSON JSON-RPC on a byte stream, every message checked.

Every line the host sends is checked against the spec as it arrives, whatever the case is about: one UTF-8
JSON object per line, a `JsonRpcMessage`, an error number that matches its code, a result of the method's
result schema (a plugin call's inner result of the plugin method's), a notification's params of its
schema, and exactly one response per request. A deviation is recorded and fails the case at its next
check (`Connection.problems`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wuu.generated import validators
from wuu.generated.catalog import (
    USER_HOST_ERROR_CODE_JSONRPC_NUMBER,
    USERHOST_MAX_FRAME_BYTES,
    USERHOST_METHODS,
)
from wuu.generated.models import UserHostErrorCode

from ..outcomes import schema_problem

Message = dict[str, Any]
RequestId = str | int

ERROR_CODES = frozenset(code.value for code in UserHostErrorCode)
# A reader admits a line a little over the frame limit, so that an oversize line is seen whole.
READ_LIMIT = USERHOST_MAX_FRAME_BYTES + 1024


def key(request_id: object) -> tuple[str, object]:
    """A request id as responses are matched: `"7"` and `7` are different ids."""
    return (type(request_id).__name__, request_id)


def code_of(message: Message) -> str | None:
    """The error code of a response, or None for a success."""
    error = message.get("error")
    if isinstance(error, dict) and isinstance(error.get("data"), dict):
        code = error["data"].get("code")
        return code if isinstance(code, str) else None
    return None


def field_of(message: Message) -> str | None:
    """The `error.data.field` of an error response, if any."""
    error = message.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    value = data.get("field") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


@dataclass
class Pending:
    """A request in flight: what it asked, to check its response against."""

    method: str
    plugin_method: str | None
    response: asyncio.Future[Message]


class Connection:
    """One client transport of the host under test."""

    def __init__(
        self,
        label: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        record: Callable[[str, str, bytes], None],
    ) -> None:
        self.label = label
        self._reader = reader
        self._writer = writer
        self._record = record
        # Several requests may share an id (a case sending a duplicate): their responses are matched in order.
        self._pending: dict[tuple[str, object], deque[Pending]] = {}
        self._ids = 0
        self.problems: list[str] = []
        """Every way the host's messages broke the spec so far, in order."""
        self.notifications: list[Message] = []
        """Every notification received, in order."""
        self.null_responses: asyncio.Queue[Message] = asyncio.Queue()
        """Error responses with a null id (to messages without a usable id), in order."""
        self.closed = asyncio.Event()
        """Set once the host has closed its side (EOF)."""
        self._arrived = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    # --- sending ---------------------------------------------------------------------------------

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    async def send_bytes(self, data: bytes) -> None:
        """Write raw bytes (the host may have closed: then nothing is written)."""
        self._record(self.label, ">", data)
        with contextlib.suppress(ConnectionError):
            self._writer.write(data)
            await self._writer.drain()

    async def send(self, message: Any) -> None:
        """Write one JSON message and its newline."""
        await self.send_bytes(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")

    def expect(self, request_id: RequestId, method: str, params: Any = None) -> asyncio.Future[Message]:
        """Register a request about to be sent by hand; the future gets its (checked) response."""
        plugin_method = None
        if method == "plugin/client/request" and isinstance(params, dict):
            plugin_method = params.get("method") if isinstance(params.get("method"), str) else None
        waiter: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key(request_id), deque()).append(Pending(method, plugin_method, waiter))
        return waiter

    async def request(
        self, method: str, params: Any = None, *, request_id: RequestId | None = None
    ) -> asyncio.Future[Message]:
        """Send a request (params omitted when None) and return the future of its response."""
        frame_id = self.next_id() if request_id is None else request_id
        message: Message = {"jsonrpc": "2.0", "id": frame_id, "method": method}
        if params is not None:
            message["params"] = params
        waiter = self.expect(frame_id, method, params)
        await self.send(message)
        return waiter

    def close_output(self) -> None:
        """Close this client's side (EOF for the host)."""
        with contextlib.suppress(OSError, RuntimeError):
            if self._writer.can_write_eof():
                self._writer.write_eof()
            else:
                self._writer.close()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def next_arrival(self) -> None:
        """Wait until the next message (or EOF) arrives."""
        self._arrived.clear()
        await self._arrived.wait()

    # --- receiving -------------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                try:
                    line = await self._reader.readline()
                except ValueError:
                    self.problems.append(f"{self.label}: the host sent a line over {READ_LIMIT} bytes")
                    break
                except ConnectionError:
                    break
                if not line:
                    break
                self._record(self.label, "<", line)
                self._take(line)
                self._arrived.set()
        finally:
            self.closed.set()
            self._arrived.set()
            for queue in self._pending.values():
                for pending in queue:
                    if not pending.response.done():
                        pending.response.set_exception(EOFError("the host closed the connection"))

    def _problem(self, text: str) -> None:
        self.problems.append(f"{self.label}: {text}")

    def _take(self, line: bytes) -> None:
        if not line.endswith(b"\n"):
            self._problem("the host's last line has no newline")
        try:
            message = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            self._problem(f"the host sent a line that is not UTF-8 JSON: {error}")
            return
        if not isinstance(message, dict):
            self._problem("the host sent a JSON value that is not an object")
            return
        problems = validators.errors("JsonRpcMessage", message)
        if problems:
            self._problem(
                f"the host sent a message that is not a JsonRpcMessage: {schema_problem(problems[0])}"
            )
            return
        if "method" in message and "id" in message:
            self._problem(f"the host sent a request ({message['method']!r}); it sends only responses")
        elif "method" in message:
            self._notification(message)
        else:
            self._response(message)

    def _notification(self, message: Message) -> None:
        spec = USERHOST_METHODS.get(message["method"])
        if spec is not None:
            if spec.kind != "notification" or spec.direction != "host_to_client":
                self._problem(f"the host sent {message['method']} as a notification")
            else:
                self._check(spec.params.__name__, message["params"], f"the params of {message['method']}")
        self.notifications.append(message)

    def _response(self, message: Message) -> None:
        if "error" in message:
            code = message["error"]["data"]["code"]
            number = USER_HOST_ERROR_CODE_JSONRPC_NUMBER[UserHostErrorCode(code)]
            if message["error"]["code"] != number:
                self._problem(
                    f"the error {code} has the JSON-RPC number {message['error']['code']}, not {number}"
                )
        if message["id"] is None:
            if "error" not in message:
                self._problem("the host sent a success response with a null id")
            self.null_responses.put_nowait(message)
            return
        queue = self._pending.get(key(message["id"]))
        pending = queue.popleft() if queue else None
        if queue is not None and not queue:
            del self._pending[key(message["id"])]
        if pending is None or pending.response.done():
            self._problem(f"the host sent a response to {message['id']!r}, which is not in flight")
            return
        if "result" in message:
            spec = USERHOST_METHODS.get(pending.method)
            if spec is not None and spec.result is not None:
                self._check(spec.result.__name__, message["result"], f"the result of {pending.method}")
            inner = USERHOST_METHODS.get(pending.plugin_method or "")
            if pending.method == "plugin/client/request" and inner is not None and inner.result is not None:
                self._check(
                    inner.result.__name__, message["result"].get("result"), f"the result of {inner.method}"
                )
        pending.response.set_result(message)

    def _check(self, model: str, instance: Any, what: str) -> None:
        problems = validators.errors(model, instance)
        if problems:
            self._problem(f"{what} does not follow {model}: {schema_problem(problems[0])}")
