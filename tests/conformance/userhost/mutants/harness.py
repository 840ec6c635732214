"""How a mutant is built: the reference user host, broken in one place through a public extension point.

- **A relay** breaks a rule that the host's transport or session implements (the envelope, initialize,
  routing, cancellation, the clients): each client connection (stdio, or one accepted on `{socket}`) is
  served by a `Relay` between the client and an unchanged `NdjsonConnection` of the in-process host on one
  end of a socket pair. The relay drops, rewrites, duplicates, holds or answers messages in either
  direction; all relays of the process share a `Hub`, so one can act on another client's connection. By
  default a relay passes every byte through unchanged, malformed and oversize lines included, so the host
  behind it judges them.
- **A composition override** breaks a rule that the Personal plugin or its services implement: the mutant
  builds the composer the host runs in place of the reference `personal()`, usually the reference composer
  with one of the plugin's method handlers wrapped (`wrap_method`, on the frozen `Plugin` with
  `dataclasses.replace`), or its host services or its `session.domain` provider wrapped.
- **A startup override** breaks a rule of the host's start (the isolation check, what it writes first): the
  mutant's process calls it, with the keyword arguments of `UserHost.start`, in place of that method.

Nothing is monkeypatched: every other rule stays as the reference host has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import orjson

from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES
from wuu.generated.models import AgentsMainSessionParams, AgentsMainSessionResult, UserInput
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer, Composition, UserHost
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.composition import sqlite_provider
from wuu.host.userhost.personal.provider import SessionDomain
from wuu.host.userhost.plugins import PluginCall, PluginHandler
from wuu.host.userhost.services import Caller, HostServices

Message = dict[str, Any]
Key = tuple[str, object]
Compose = Callable[[], Composer]
"""A composition override: makes the composer the mutant host runs in place of the reference `personal()`."""
Start = Callable[..., Awaitable[UserHost]]
"""Starts a host, given the keyword arguments of `UserHost.start`."""


@dataclasses.dataclass(frozen=True)
class Startup:
    """A startup override: the mutant's process starts its host with `start` instead of `UserHost.start`."""

    start: Start

    @property
    def doc(self) -> str:
        """How it breaks the rule: the docstring of `start`."""
        return inspect.getdoc(self.start) or ""


# A relay takes a client's line whole up to a little over the frame limit; a longer one streams through.
RELAY_LINE_LIMIT = USERHOST_MAX_FRAME_BYTES + 1024
READ_BUFFER = 64 * 1024
"""The relay's stream readers' limit: what the relay reads ahead of its writes stays small (about twice
this), so a client that stops reading stalls the host's queue about as soon as on a direct connection."""


async def read_line(reader: asyncio.StreamReader, most: int) -> tuple[bytes, bool]:
    """The reader's next line and True (the last one may lack its newline; b"" at the end of the input);
    or, once a line has run past `most` bytes, what was read of it and False (its rest follows)."""
    line = bytearray()
    while True:
        try:
            line += await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            line += end.partial
        except asyncio.LimitOverrunError as over:
            line += await reader.readexactly(over.consumed)
            if len(line) <= most:
                continue
            return bytes(line), False
        return bytes(line), True


# --- messages --------------------------------------------------------------------------------------


def message_of(line: bytes) -> Message | None:
    """The line's JSON object, or None when it is not one."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


def encode(message: Message) -> bytes:
    """The message as one compact line (json, not orjson: a mutant may send what orjson refuses to write)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def key(request_id: object) -> Key:
    """A request id as responses are matched: `"7"` and `7` are different ids (any JSON value has one, an
    id that is not a JsonRpcId too)."""
    if isinstance(request_id, dict | list):
        return (type(request_id).__name__, json.dumps(request_id, sort_keys=True))
    return (type(request_id).__name__, request_id)


def code_of(message: Message) -> str | None:
    """The error code of a response, or None."""
    error = message.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    code = data.get("code") if isinstance(data, dict) else None
    return code if isinstance(code, str) else None


def error_message(request_id: object, number: int, code: str, text: str) -> Message:
    """A JsonRpcErrorResponse, as a mutant answers one itself."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": number, "message": text, "data": {"code": code}},
    }


def plugin_method(method: str, params: Message) -> str | None:
    """The plugin method a `plugin/client/request` calls (None for any other request)."""
    inner = params.get("method") if method == "plugin/client/request" else None
    return inner if isinstance(inner, str) else None


# --- the relays ------------------------------------------------------------------------------------


class Hub:
    """What every relay of the mutant process shares."""

    def __init__(self) -> None:
        self.relays: list[Relay] = []
        """The connections being served, in the order they were accepted."""

    def others(self, relay: Relay) -> list[Relay]:
        """Every other connection being served."""
        return [each for each in self.relays if each is not relay]


class Relay:
    """Sits between one client connection and the host's connection for it.

    Override `from_client` and `from_host` (and `client_ended`) to break a rule; call `to_host`,
    `to_client`, `answer`, `send` or `end` from them. `requests` maps the key (`key(id)`) of every
    request sent to the host (as it was sent) that the host has not answered yet to its method and params,
    so a response can be matched to what it answers (`answered`, while `from_host` handles it).
    """

    def __init__(self, hub: Hub, transport: str) -> None:
        self.hub = hub
        self.transport = transport
        """`stdio` or `unix`."""
        self.requests: dict[Key, tuple[str, Message]] = {}
        self.answered: tuple[str, Message] | None = None
        """The method and params of the request the response now in `from_host` answers, if any."""
        self.initialized: Message | None = None
        """The result of this connection's first successful initialize, once it has one."""
        self.keep_client = False
        """Whether the client's connection stays open once the host has closed its side (until the client
        ends it), instead of being closed with it."""
        self._client: asyncio.StreamWriter | None = None
        self._host: asyncio.StreamWriter | None = None
        self._draining = False  # waiting for the client to take what it was sent

    # --- what a mutant overrides

    backpressure: ClassVar[bool] = True
    """Whether the relay waits for the client to take what it was sent before it reads the host's next
    message (as a direct connection does: a client that stops reading stalls the host's queue)."""

    def from_client(self, line: bytes) -> None:
        """One line from the client (the last one may lack its newline)."""
        self.to_host(line)

    def oversize_from_client(self, piece: bytes) -> None:
        """One piece of a client line over the frame limit, in order (the last one ends with the newline
        or the input): by default it goes to the host, which refuses the line whole."""
        self._write_host(piece)

    def from_host(self, line: bytes) -> None:
        """One message from the host."""
        self.to_client(line)

    def client_ended(self) -> None:
        """The client's input has ended (EOF): by default the host's input ends too."""
        self.end_host_input()

    # --- what it calls

    def to_host(self, line: bytes) -> None:
        """Send a line to the host (a request in it is tracked in `requests`)."""
        self._track_request(line)
        self._write_host(line)

    def _write_host(self, data: bytes) -> None:
        if self._host is not None and not self._host.is_closing():
            self._host.write(data)

    def to_client(self, line: bytes) -> None:
        if self._client is not None and not self._client.is_closing():
            self._client.write(line)

    def answer(self, message: Message) -> None:
        """Send a message to the client as if the host had sent it."""
        self.to_client(encode(message))

    def send(self, message: Message) -> None:
        """Send a message to the host as if the client had sent it."""
        self.to_host(encode(message))

    def end_host_input(self) -> None:
        """End the host's input, as a client's EOF does."""
        if self._host is not None and not self._host.is_closing() and self._host.can_write_eof():
            self._host.write_eof()

    def end(self) -> None:
        """Close the client's connection and the host's, as if both sides had gone."""
        for writer in (self._client, self._host):
            if writer is not None:
                writer.close()

    # --- running

    async def run(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        host: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        """Relay until the host has closed its side (then the client's connection is closed)."""
        from_client, self._client = client
        from_host, self._host = host
        self.hub.relays.append(self)
        inbound = asyncio.create_task(self._pump_client(from_client))
        try:
            while line := (await read_line(from_host, RELAY_LINE_LIMIT))[0]:
                self._track_response(line)
                self.from_host(line)
                if self.backpressure:
                    self._draining = True
                    await self._client.drain()
                    self._draining = False
        except ConnectionError:
            pass
        finally:
            if self.keep_client:
                await asyncio.gather(inbound, return_exceptions=True)
            inbound.cancel()
            await asyncio.gather(inbound, return_exceptions=True)
            self.hub.relays.remove(self)
            self.end()

    async def _pump_client(self, reader: asyncio.StreamReader) -> None:
        oversize = False  # inside a line over the limit
        with contextlib.suppress(ConnectionError):  # the client's connection failed
            while True:
                line, whole = await read_line(reader, RELAY_LINE_LIMIT)
                if not line:
                    break
                if oversize or not whole:
                    # Handed on in pieces as it arrives, never held whole.
                    self.oversize_from_client(line)
                    oversize = not whole
                else:
                    self.from_client(line)
                if not await self._drain_host():
                    return
            self.client_ended()

    async def _drain_host(self) -> bool:
        """Wait until the host takes what it was sent; False once its connection has failed."""
        assert self._host is not None and self._client is not None
        try:
            await self._host.drain()
        except ConnectionError:
            # The host dropped the connection: one whose answers wait for a client that does not take them
            # is dropped as well (the host disconnects a client that does not read).
            if self._draining:
                self._client.transport.abort()
            return False
        return True

    def _track_request(self, line: bytes) -> None:
        message = message_of(line)
        if message is None or not isinstance(message.get("method"), str) or "id" not in message:
            return
        params = message.get("params")
        # A duplicate of an id in flight is not tracked: the host refuses it.
        self.requests.setdefault(
            key(message["id"]), (message["method"], params if isinstance(params, dict) else {})
        )

    def _track_response(self, line: bytes) -> None:
        message = message_of(line)
        self.answered = None
        if message is None or "method" in message or message.get("id") is None:
            return
        self.answered = self.requests.pop(key(message["id"]), None)
        initialize = self.answered is not None and self.answered[0] == "initialize"
        if initialize and "result" in message and self.initialized is None:
            self.initialized = message["result"]


class ReplyRewriter(Relay):
    """A relay that passes each response to a client request through `rewrite` on its way out."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        """The messages to send instead of `response` to the request (`method`, `params`)."""
        return [response]

    def from_host(self, line: bytes) -> None:
        request = self.answered
        message = message_of(line)
        if message is None or request is None:
            self.to_client(line)
            return
        rewritten = self.rewrite(message, *request)
        if rewritten == [message_of(line)]:
            self.to_client(line)  # unchanged: the host's own bytes
            return
        for each in rewritten:
            self.answer(each)


class RequestRewriter(Relay):
    """A relay that passes each client request (a JSON object with a method) through `rewrite`."""

    def rewrite(self, request: Message) -> list[Message]:
        """The messages to send to the host instead of `request`."""
        return [request]

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        if message is None or not isinstance(message.get("method"), str):
            self.to_host(line)
            return
        rewritten = self.rewrite(message)
        if rewritten == [message_of(line)]:
            self.to_host(line)  # unchanged: the client's own bytes
            return
        for each in rewritten:
            self.send(each)


def rewrite_results(method: str, change: Callable[[Any, Message], None], *, doc: str) -> type[Relay]:
    """A relay that changes, in place, the result of every successful `method` request:
    `change(result, the request's params)`. `doc` says how (the mutant's docstring)."""

    class Rewriter(ReplyRewriter):
        def rewrite(self, response: Message, request_method: str, params: Message) -> list[Message]:
            if request_method == method and "result" in response:
                change(response["result"], params)
            return [response]

    Rewriter.__doc__ = doc
    return Rewriter


def rewrite_plugin_params(
    plugin: str, change: Callable[[Message, Message], None], *, doc: str
) -> type[Relay]:
    """A relay that changes, in place, what a `plugin/client/request` of the plugin method `plugin` asks:
    `change(the plugin params, the whole request params)`. `doc` says how (the mutant's docstring)."""

    class Rewriter(RequestRewriter):
        def rewrite(self, request: Message) -> list[Message]:
            params = request.get("params")
            if isinstance(params, dict) and plugin_method(request["method"], params) == plugin:
                inner = params.get("params")
                if isinstance(inner, dict):
                    change(inner, params)
            return [request]

    Rewriter.__doc__ = doc
    return Rewriter


# --- composition overrides -------------------------------------------------------------------------


def recompose(change: Callable[[UserHost, Composition], Composition]) -> Composer:
    """A composer that builds the reference `personal()` composition and hands back what
    `change(host, composition)` makes of it."""
    reference = personal()

    async def compose(host: UserHost) -> Composition:
        return change(host, await reference(host))

    return compose


def wrap_methods(
    names: Sequence[str], make: Callable[[PluginHandler, Mapping[str, PluginHandler]], PluginHandler]
) -> Composer:
    """The reference composer with the handler of each plugin method in `names` replaced by
    `make(handler, the plugin's reference handlers)`, so a broken handler can call the plugin's others."""

    def change(host: UserHost, composition: Composition) -> Composition:
        plugins = []
        for plugin in composition.plugins:
            methods = {**plugin.methods}
            for name in names:
                if name in plugin.methods:
                    methods[name] = make(plugin.methods[name], plugin.methods)
            plugins.append(dataclasses.replace(plugin, methods=methods))
        return dataclasses.replace(composition, plugins=plugins)

    return recompose(change)


def wrap_method(method: str, make: Callable[[PluginHandler], PluginHandler]) -> Composer:
    """The reference composer with the handler of the plugin method `method` replaced by `make(handler)`."""
    return wrap_methods([method], lambda handler, _: make(handler))


async def main_session(methods: Mapping[str, PluginHandler], call: PluginCall) -> str:
    """The main session's id, as the plugin's own `agents.main_session` handler names it."""
    result = await methods["agents.main_session"](AgentsMainSessionParams(), call)
    assert isinstance(result, AgentsMainSessionResult)
    return result.session_id


def rewrite_result(method: str, change: Callable[[Any, Any], WireModel]) -> Composer:
    """The reference composer whose `method` handler answers `change(result, params)` instead."""

    def make(handler: PluginHandler) -> PluginHandler:
        async def broken(params: Any, call: PluginCall) -> WireModel:
            return change(await handler(params, call), params)

        return broken

    return wrap_method(method, make)


def rewrite_params(method: str, change: Callable[[Any], dict[str, Any]]) -> Composer:
    """The reference composer whose `method` handler runs with the fields `change(params)` returns put over
    the ones asked."""

    def make(handler: PluginHandler) -> PluginHandler:
        async def broken(params: Any, call: PluginCall) -> WireModel:
            return await handler(params.model_copy(update=change(params)), call)

        return broken

    return wrap_method(method, make)


def wrap_services(make: Callable[[HostServices], HostServices]) -> Composer:
    """The reference composer with its host services (questions, push) replaced by `make(services)`."""

    def change(host: UserHost, composition: Composition) -> Composition:
        assert composition.services is not None
        return dataclasses.replace(composition, services=make(composition.services))

    return recompose(change)


def with_provider(make: Callable[[SessionDomain], Any]) -> Composer:
    """The reference composer on the bundled `session.domain` provider wrapped by `make(provider)` (usually
    a `ProviderProxy`)."""

    async def provider(host: UserHost, now: datetime) -> SessionDomain:
        wrapped: SessionDomain = make(await sqlite_provider(host, now))
        return wrapped

    return personal(provider=provider)


class ProviderProxy:
    """A `session.domain` provider that serves everything from the one it wraps; a mutant overrides one
    method."""

    def __init__(self, inner: SessionDomain) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ServicesProxy:
    """Host services (questions, push) that serve everything from the ones they wrap; a mutant overrides
    one method."""

    def __init__(self, inner: HostServices) -> None:
        self.inner = inner

    async def user_question_answer(self, params: Any, caller: Caller) -> Any:
        return await self.inner.user_question_answer(params, caller)

    async def user_question_dismiss(self, params: Any, caller: Caller) -> Any:
        return await self.inner.user_question_dismiss(params, caller)

    async def push_register(self, params: Any, caller: Caller) -> Any:
        return await self.inner.push_register(params, caller)

    async def push_unregister(self, params: Any, caller: Caller) -> Any:
        return await self.inner.push_unregister(params, caller)


@dataclasses.dataclass
class CallWith:
    """A plugin call as its handler sees it, with another user input."""

    call: PluginCall
    user_input: UserInput | None

    @property
    def caller(self) -> Caller:
        return self.call.caller

    @property
    def revoked(self) -> asyncio.Event:
        return self.call.revoked

    def admit(self, work: Coroutine[Any, Any, None]) -> None:
        self.call.admit(work)


__all__ = [
    "READ_BUFFER",
    "RELAY_LINE_LIMIT",
    "CallWith",
    "Compose",
    "Hub",
    "Key",
    "Message",
    "ProviderProxy",
    "Relay",
    "ReplyRewriter",
    "RequestRewriter",
    "ServicesProxy",
    "Start",
    "Startup",
    "code_of",
    "encode",
    "error_message",
    "key",
    "main_session",
    "message_of",
    "plugin_method",
    "read_line",
    "recompose",
    "rewrite_params",
    "rewrite_plugin_params",
    "rewrite_result",
    "rewrite_results",
    "with_provider",
    "wrap_method",
    "wrap_methods",
    "wrap_services",
]
