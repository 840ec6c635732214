"""What a provider supplies to the SDK: `initialize`, a typed methods map, and `close`.

This is the Python counterpart of the seed's `ExecutionBackendV4`. A handler receives the method's
parameters already validated, as their plain class (`wuu.generated.plain.WORKER_METHODS`), and returns the
method's result as its plain class or its pydantic model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wuu.generated.plain import InitializeParams, PlainModel, ProcessEvent, ToolResult, WorkerInfo

if TYPE_CHECKING:
    import asyncio


class RequestContext(Protocol):
    """What a handler can see and do while its request is in flight."""

    @property
    def id(self) -> str:
        """The request's id."""

    @property
    def method(self) -> str:
        """The request's method."""

    @property
    def binding(self) -> InitializeParams:
        """The pinned binding (for `initialize`: the binding being established)."""

    @property
    def signal(self) -> asyncio.Event:
        """Set when this request is cancelled or the connection ends. The handler's task is also cancelled."""

    @property
    def lifetime_signal(self) -> asyncio.Event:
        """Set when the connection ends; the lifetime of detached work such as background processes."""

    @property
    def granted_capabilities(self) -> frozenset[str]:
        """The capabilities granted at `initialize` (empty until then)."""

    def emit_process(self, event: ProcessEvent) -> None:
        """Publish a `process/event` notification on this connection."""

    async def invoke_tool(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call a tool back through the host (`tool/invoke`), valid only while this request is live."""


Handler = Callable[[Any, RequestContext], Awaitable[PlainModel] | PlainModel]
"""A method handler: (params model, context) -> result model.

A handler that awaits runs in its request's own task, which cancellation cancels. A handler that
never waits may be a plain function: it is called as soon as its request is read and answered at
once, without a task of its own, so it cannot be cancelled and must not block.

A handler object may also have an `available() -> bool` method, asked once `initialize` has
succeeded: a handler that is not available is neither advertised nor called (a delegating backend
learns only from its peer which methods exist).
"""


@dataclass(frozen=True)
class ExecutionBackendV4:
    """A worker implementation served by `run_execution_backend_v4`.

    `initialize` prepares the provider for the binding (it MAY create the workspace; raising a
    `WorkerError` fails the initialize and kills the connection). `methods` maps protocol method
    names to handlers; every method not in it is answered `unsupported_method`, never substituted.
    `close` runs once at the end of the connection, after every handler has drained; its errors are
    reported. `capabilities` are those the provider honours; the SDK grants the requested subset, and
    `process.start.v1` only to a backend with both `process/start` and `process/list` (available), whose
    replies it checks for the host's `operation_id`: keeping it in durable records is the provider's part.
    """

    initialize: Callable[[InitializeParams, RequestContext], Awaitable[None]]
    methods: Mapping[str, Handler]
    close: Callable[[], Awaitable[None]]
    capabilities: Sequence[str] = ()
    info: WorkerInfo = field(default_factory=lambda: WorkerInfo(name="wuu-python-sdk", version="0.1.0"))
