"""`delegate_execution_backend_v4`: an explicit peer client for a partial backend (spec/methods/worker.json).

The peer starts lazily at `initialize` and must accept the same complete binding and grant the
requested capabilities. It is never retried or replaced: once it fails, every call fails. Each call
keeps its own cancellation: a cancelled call sends `cancel` to the peer and waits up to
`WORKER_DELEGATE_CANCEL_WAIT_MS` for the peer's terminal reply before closing the unresponsive peer.
Peer callbacks go through the exact outer request's `invoke_tool`; peer process events go out on
the outer connection. A spawned peer gets EOF at close and `shutdown_grace_ms` to exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from wuu.generated import models
from wuu.generated.catalog import (
    WORKER_DELEGATE_CANCEL_WAIT_MS,
    WORKER_DELEGATE_SHUTDOWN_GRACE_MS,
    WORKER_PROTOCOL_VERSION,
)
from wuu.generated.plain import (
    WORKER_METHODS,
    CancelParams,
    ErrorCode,
    InitializeParams,
    InitializeResult,
    Invalid,
    PlainModel,
    ProcessEvent,
    WorkerInfo,
)

from .backend import ExecutionBackendV4, RequestContext
from .client import ConnectionLost, ReplyError, WorkerClient
from .errors import CleanupFailed, WorkerError

MAX_GRACE_MS = 2_147_483_647


@dataclass(frozen=True)
class AttachedTransport:
    """An already connected peer. Its `close` owns the physical cleanup."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    close: Callable[[], Awaitable[None]]


def delegate_execution_backend_v4(
    *,
    command: Sequence[str] | None = None,
    transport: AttachedTransport | None = None,
    capabilities: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    shutdown_grace_ms: int | None = None,
) -> ExecutionBackendV4:
    """A backend that forwards every method to a peer worker.

    Give exactly one of `command` (spawned at `initialize`, inheriting this process's environment
    unless `env` is given) and `transport`. `shutdown_grace_ms` (1..2,147,483,647, default 10 s)
    is the spawned peer's exit budget after EOF; it cannot be combined with `transport`.
    Override single methods with `dataclasses.replace(peer, methods={**peer.methods, ...})`.
    """
    if (command is None) == (transport is None):
        raise ValueError("give exactly one of command and transport")
    if shutdown_grace_ms is not None:
        if transport is not None:
            raise ValueError("shutdown_grace_ms: an attached transport's close owns its cleanup")
        if not 1 <= shutdown_grace_ms <= MAX_GRACE_MS:
            raise ValueError(f"shutdown_grace_ms: must be an integer from 1 to {MAX_GRACE_MS}")
    if command is not None and not command:
        raise ValueError("command: needs at least the program")
    peer = _PeerWorker(command, transport, env, shutdown_grace_ms or WORKER_DELEGATE_SHUTDOWN_GRACE_MS)
    methods = {
        name: _Forward(peer, name)
        for name, spec in WORKER_METHODS.items()
        if spec.direction == "host_to_worker" and name not in ("initialize", "cancel")
    }
    return ExecutionBackendV4(
        initialize=peer.initialize,
        methods=methods,
        close=peer.close,
        capabilities=tuple(capabilities),
        info=WorkerInfo(name="wuu-delegate", version="0.1.0"),
    )


class _PeerWorker:
    def __init__(
        self,
        command: Sequence[str] | None,
        transport: AttachedTransport | None,
        env: Mapping[str, str] | None,
        grace_ms: int,
    ) -> None:
        self._command = command
        self._transport = transport
        self._env = env
        self._grace_ms = grace_ms
        self.client: WorkerClient | None = None
        self.methods: frozenset[str] = frozenset()
        self.failure: str | None = None
        self.parents: dict[str, RequestContext] = {}
        self._relay: asyncio.Task[None] | None = None

    async def initialize(self, params: InitializeParams, context: RequestContext) -> None:
        if self._command is not None:
            client = await WorkerClient.spawn(
                self._command, env=self._env, tool_invoker=self._tool_invoke, record=False
            )
        else:
            assert self._transport is not None
            client = WorkerClient(
                self._transport.reader,
                self._transport.writer,
                token=secrets.token_hex(16),
                tool_invoker=self._tool_invoke,
                record=False,
            )
        self.client = client
        self._relay = asyncio.create_task(self._relay_events(context))
        reply = await self.call("initialize", params, context)
        result = InitializeResult.model_validate(reply)
        if result.version != WORKER_PROTOCOL_VERSION:
            self.failure = f"the peer speaks version {result.version}"
            raise WorkerError(ErrorCode.PROTOCOL_MISMATCH, self.failure)
        missing = set(params.capabilities or ()) - set(result.capabilities)
        if missing:
            self.failure = f"the peer does not grant {sorted(missing)}"
            raise WorkerError(ErrorCode.INTERNAL, self.failure)
        self.methods = frozenset(result.methods)

    async def _relay_events(self, context: RequestContext) -> None:
        assert self.client is not None
        async for event in self.client.events():
            context.emit_process(ProcessEvent.model_validate(event.to_wire()))

    async def _tool_invoke(self, params: models.ToolInvokeParams, parent: str) -> models.ToolResult:
        """The peer's `tool/invoke`, passed up to the host as a callback of the request it serves."""
        outer = self.parents.get(parent)
        if outer is None:
            raise ReplyError("tool/invoke", f"{ErrorCode.PARENT_NOT_LIVE.value}: {parent}")
        try:
            result = await outer.invoke_tool(params.tool, orjson.loads(params.arguments))
        except WorkerError as error:
            raise ReplyError("tool/invoke", error.wire) from None
        return models.ToolResult.model_validate(result.to_wire())

    async def call(self, method: str, params: PlainModel, context: RequestContext) -> dict[str, Any]:
        """Forward one request; the peer's result data, or its error as a WorkerError."""
        if self.failure is not None or self.client is None:
            raise WorkerError(ErrorCode.INTERNAL, f"the delegate peer has failed: {self.failure}")
        client = self.client
        frame_id = client.next_id()
        self.parents[frame_id] = context
        try:
            waiter = client.begin(method, params.to_wire(), request_id=frame_id)
            try:
                reply = await asyncio.shield(waiter)
            except asyncio.CancelledError:
                reply = await self._after_cancel(client, frame_id, waiter)
        except ConnectionLost as error:
            await self._fail(str(error))
            raise WorkerError(ErrorCode.INTERNAL, f"the delegate peer was lost: {error}") from None
        finally:
            self.parents.pop(frame_id, None)
        if "error" in reply:
            raise WorkerError.from_wire(str(reply["error"]))
        data: dict[str, Any] = reply["data"]
        return data

    async def _after_cancel(
        self, client: WorkerClient, frame_id: str, waiter: asyncio.Future[dict[str, Any]]
    ) -> dict[str, Any]:
        """Cancel the peer's request and wait for its terminal reply, closing an unresponsive peer."""
        with contextlib.suppress(ConnectionLost, ReplyError):
            await client.request("cancel", CancelParams(id=frame_id).to_wire())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), WORKER_DELEGATE_CANCEL_WAIT_MS / 1000)
        except TimeoutError:
            await self._fail("the peer did not answer a cancelled request in time")
            raise asyncio.CancelledError from None

    async def _fail(self, reason: str) -> None:
        """A terminal transport failure closes the peer at once; it is never retried."""
        if self.failure is None:
            self.failure = reason
            if self.client is not None:
                await self.client.close(budget=0)

    async def close(self) -> None:
        if self.client is None:
            return
        outcome = await self.client.close(budget=self._grace_ms / 1000)
        if self._relay is not None:
            await asyncio.gather(self._relay, return_exceptions=True)
        if self._transport is not None:
            await self._transport.close()
        elif self.failure is None and not outcome.clean:
            ended = (
                "was killed after its exit budget" if outcome.killed else f"exited with {outcome.returncode}"
            )
            raise CleanupFailed(f"the delegate peer {ended}; its resources may remain")


class _Forward:
    """A handler that forwards one method to the peer, available once the peer has said it has it."""

    def __init__(self, peer: _PeerWorker, method: str) -> None:
        self._peer = peer
        self._method = method
        self._result = WORKER_METHODS[method].result

    def available(self) -> bool:
        return self._method in self._peer.methods

    async def __call__(self, params: PlainModel, context: RequestContext) -> PlainModel:
        data = await self._peer.call(self._method, params, context)
        assert self._result is not None
        try:
            result: PlainModel = self._result.model_validate(data)
        except Invalid as error:
            raise WorkerError(
                ErrorCode.INTERNAL, f"the peer's {self._method} result is malformed: {error}"
            ) from None
        return result
