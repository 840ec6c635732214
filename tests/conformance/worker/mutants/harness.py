"""How a mutant is built: the native reference worker, broken in one place through a public extension point.

- **A handler override** breaks a rule that a provider implements (tools, paths, processes, exports,
  the end of the connection): the native worker's backend is an `ExecutionBackendV4`, a frozen
  dataclass of `initialize`, `methods` and `close`, and the mutant replaces one of them with
  `dataclasses.replace`, wrapping the original (`override`, `rewrite_result`, ...).
- **A broken relay** breaks a rule that the SDK implements (framing, ids, the token, the binding,
  cancellation, methods): the unchanged backend is served by `wuu.worker.serve` on one end of a socket
  pair, and a `Relay` between this process's stdio and the other end drops, rewrites, holds or answers
  frames on their way in or out, or puts a fresh connection in place of the worker's (`reconnect`).
  By default a relay passes every byte through unchanged, malformed and oversize frames included, so
  the worker behind it judges them.

Nothing is monkeypatched: every other rule stays as the reference worker has it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from pydantic import ValidationError

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES, WORKER_TOOLS
from wuu.generated.models import ErrorCode, ExecutionToolRequestV4, InitializeParams
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, RequestContext, WorkerError, serve
from wuu.worker.envelope import frame_id
from wuu.worker.errors import split_error
from wuu.worker.framing import MalformedFrame, decode, reader_limit
from wuu.worker.native.worker import NativeWorker
from wuu.worker.streams import connect_pipes

Frame = dict[str, Any]
Override = Callable[[NativeWorker, ExecutionBackendV4], ExecutionBackendV4]
"""A handler override: (the worker, its backend) -> the broken backend."""
Handler = Callable[[Any, RequestContext], Awaitable[WireModel]]

# The relay reads lines of up to four frame limits, so an oversize frame reaches the worker whole.
RELAY_LINE_LIMIT = 4 * WORKER_MAX_FRAME_BYTES


# --- frames ------------------------------------------------------------------------------------------


def frame_of(line: bytes) -> Frame | None:
    """The line's frame, or None when it is not a JSON object."""
    try:
        return decode(line)
    except MalformedFrame:
        return None


def malformed(line: bytes) -> bool:
    """Whether the spec calls this line a malformed frame (for a worker: every frame needs an id)."""
    if not line.endswith(b"\n") or len(line) > WORKER_MAX_FRAME_BYTES:
        return True
    frame = frame_of(line)
    if frame is None:
        return True
    try:
        frame_id(frame.get("id"))
    except MalformedFrame:
        return True
    return "method" in frame and not isinstance(frame["method"], str)


def encode(frame: Frame) -> bytes:
    return orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)


def code_of(frame: Frame) -> str | None:
    """The error code of a reply frame, or None."""
    error = frame.get("error")
    return split_error(error)[0] if isinstance(error, str) else None


# --- the broken relay ------------------------------------------------------------------------------


class Relay:
    """Sits between the host (this process's stdio) and a correct worker connection.

    Override `from_host` and `from_worker` to break a rule; call `to_worker`, `to_host` or `answer`
    from them. `requests` maps the id of every host request that has not been answered yet to its
    method and data, so a reply can be matched to what it answers. `reconnect` puts a fresh worker
    connection behind the relay.
    """

    def __init__(self) -> None:
        self.requests: dict[str, tuple[str, Frame]] = {}
        self.answered: tuple[str, Frame] | None = None
        """The method and data of the request that the frame now in `from_worker` answers, if any."""
        self.initialized: tuple[str, Frame] | None = None
        """The token and data of the first initialize that the worker connection accepted, once it has."""
        self._host: asyncio.StreamWriter | None = None
        self._worker: asyncio.StreamWriter | None = None
        self._initialize_tokens: dict[str, str] = {}
        # While a reconnect is pending: the fresh backend, and the host's lines that wait for it.
        self._fresh: ExecutionBackendV4 | None = None
        self._held: list[bytes] | None = None
        self._host_ended = False

    # --- what a mutant overrides

    def from_host(self, line: bytes) -> None:
        """One line from the host (the last one may lack its newline)."""
        self.to_worker(line)

    def from_worker(self, line: bytes) -> None:
        """One frame from the worker."""
        self.to_host(line)

    # --- what it calls

    def to_worker(self, line: bytes) -> None:
        assert self._worker is not None
        if self._held is not None:
            self._held.append(line)
            return
        self._worker.write(line)

    def to_host(self, line: bytes) -> None:
        assert self._host is not None
        if not self._host.is_closing():
            self._host.write(line)

    def answer(self, frame: Frame) -> None:
        """Send a frame to the host as if the worker had sent it."""
        self.to_host(encode(frame))

    def reconnect(self, backend: ExecutionBackendV4) -> None:
        """End the worker connection as at EOF, and serve `backend` on a fresh one in its place.

        The frames that the ending connection still sends reach `from_worker` as usual; the host's lines
        from now on wait, and go to the fresh connection once it is up (so do those that `from_worker`
        sends on). `initialized` starts over.
        """
        assert self._worker is not None
        if self._held is None:
            self._held = []
            self._worker.write_eof()
        self._fresh = backend
        self.initialized = None

    # --- running

    async def run(self, backend: ExecutionBackendV4) -> None:
        """Serve `backend` behind this relay until the host's input ends and the worker has finished."""
        from_worker, serving = await self._connect(backend)
        stdin, self._host, _ = await connect_pipes(limit=RELAY_LINE_LIMIT)
        inbound = asyncio.create_task(self._pump_host(stdin))
        try:
            while True:
                while line := await from_worker.readline():
                    self._track_reply(line)
                    self.from_worker(line)
                    await self._host.drain()
                if self._fresh is None:
                    break
                from_worker, serving = await self._replace_connection(serving)
        except ConnectionError:
            pass
        finally:
            self._host.close()
            inbound.cancel()
            await asyncio.gather(inbound, serving, return_exceptions=True)

    async def _connect(self, backend: ExecutionBackendV4) -> tuple[asyncio.StreamReader, asyncio.Task[None]]:
        """Serve `backend` on one end of a new socket pair; this relay writes to the other (the reader
        returned, with the task that serves)."""
        ours, theirs = socket.socketpair()
        worker_in, worker_out = await asyncio.open_connection(sock=theirs, limit=reader_limit())
        serving = asyncio.create_task(serve(backend, worker_in, worker_out))
        from_worker, self._worker = await asyncio.open_connection(sock=ours, limit=RELAY_LINE_LIMIT)
        return from_worker, serving

    async def _replace_connection(
        self, serving: asyncio.Task[None]
    ) -> tuple[asyncio.StreamReader, asyncio.Task[None]]:
        """The pending reconnect, once the ending connection has sent its last frame."""
        assert self._worker is not None and self._fresh is not None and self._held is not None
        # The old connection runs its close before the fresh one starts, as two connections in a row would.
        await asyncio.gather(serving, return_exceptions=True)
        ending = self._worker
        from_worker, serving = await self._connect(self._fresh)
        ending.close()
        held, self._held, self._fresh = self._held, None, None
        for line in held:
            self.to_worker(line)
        if self._host_ended:
            self._end_worker_input()
        return from_worker, serving

    async def _pump_host(self, stdin: asyncio.StreamReader) -> None:
        assert self._worker is not None
        try:
            while line := await stdin.readline():
                self._track_request(line)
                self.from_host(line)
                await self._drain_worker()
        except (ConnectionError, ValueError):  # ValueError: a line over RELAY_LINE_LIMIT
            pass
        self._host_ended = True
        if self._held is None:
            self._end_worker_input()

    async def _drain_worker(self) -> None:
        writer = self._worker
        assert writer is not None
        try:
            await writer.drain()
        except ConnectionError:
            # A connection that a reconnect has replaced meanwhile: the fresh one takes the lines.
            if writer is self._worker:
                raise

    def _end_worker_input(self) -> None:
        assert self._worker is not None
        if self._worker.can_write_eof():
            self._worker.write_eof()

    def _track_request(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and isinstance(frame.get("id"), str) and isinstance(frame.get("method"), str):
            data = frame.get("data")
            self.requests[frame["id"]] = (frame["method"], data if isinstance(data, dict) else {})
            if frame["method"] == "initialize" and isinstance(frame.get("token"), str):
                self._initialize_tokens[frame["id"]] = frame["token"]

    def _track_reply(self, line: bytes) -> None:
        frame = frame_of(line)
        self.answered = None
        if frame is not None and "method" not in frame and isinstance(frame.get("id"), str):
            self.answered = self.requests.pop(frame["id"], None)
            token = self._initialize_tokens.pop(frame["id"], None)
            if (
                self.initialized is None
                and token is not None
                and self.answered is not None
                and self.answered[0] == "initialize"
                and "data" in frame
            ):
                self.initialized = (token, self.answered[1])


class ReplyRewriter(Relay):
    """A relay that passes each reply to a host request through `rewrite` on its way out."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        """The frames to send instead of `reply` to the request (`method`, `data`)."""
        return [reply]

    def from_worker(self, line: bytes) -> None:
        frame = frame_of(line)
        request = self.answered
        if frame is None or "method" in frame or request is None:
            self.to_host(line)
            return
        for each in self.rewrite(frame, *request):
            self.answer(each)


def rewrite_results(
    method: str, change: Callable[[Frame, Frame], None], *, doc: str, tool: str = ""
) -> type[Relay]:
    """A relay that changes, in place, the result data of every successful `method` (of `tool`, for
    execute): `change(result data, request data)`. `doc` says how (the mutant's docstring)."""

    class Rewriter(ReplyRewriter):
        def rewrite(self, reply: Frame, request_method: str, data: Frame) -> list[Frame]:
            if request_method == method and "data" in reply and (not tool or data.get("tool") == tool):
                change(reply["data"], data)
            return [reply]

    Rewriter.__doc__ = doc
    return Rewriter


# --- handler overrides -----------------------------------------------------------------------------


def override(
    backend: ExecutionBackendV4, method: str, make: Callable[[Handler], Handler]
) -> ExecutionBackendV4:
    """The backend with the handler of `method` replaced by `make(original handler)`."""
    return dataclasses.replace(backend, methods={**backend.methods, method: make(backend.methods[method])})


def rewrite_params(method: str, change: Callable[[Any], dict[str, Any]]) -> Override:
    """An override that runs `method` with the fields `change(params)` returns put over the ones asked."""

    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        def make(original: Handler) -> Handler:
            async def handler(params: Any, context: RequestContext) -> WireModel:
                return await original(params.model_copy(update=change(params)), context)

            return handler

        return override(backend, method, make)

    return broken


def rewrite_initialize(change: Callable[[InitializeParams], dict[str, Any]]) -> Override:
    """An override whose provider initializes with the fields `change(params)` returns put over the binding
    asked (the SDK still pins the binding as asked, and answers with it)."""

    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        async def initialize(params: InitializeParams, context: RequestContext) -> None:
            await backend.initialize(params.model_copy(update=change(params)), context)

        return dataclasses.replace(backend, initialize=initialize)

    return broken


def answer_error(
    method: str, code: ErrorCode, answer: Callable[[Any], WireModel], tool: str = ""
) -> Override:
    """An override that answers `method` requests failing with `code` with `answer(params)` instead."""

    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        def make(original: Handler) -> Handler:
            async def handler(params: Any, context: RequestContext) -> WireModel:
                try:
                    return await original(params, context)
                except WorkerError as error:
                    if error.code is not code or (tool and getattr(params, "tool", None) != tool):
                        raise
                    return answer(params)

            return handler

        return override(backend, method, make)

    return broken


def rewrite_result(method: str, change: Callable[[Any, Any], WireModel], tool: str = "") -> Override:
    """An override whose `method` handler answers `change(result, params)` instead of the result it returns
    (for execute: only calls of `tool`, when one is named)."""

    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        def make(original: Handler) -> Handler:
            async def handler(params: Any, context: RequestContext) -> WireModel:
                result = await original(params, context)
                if tool and getattr(params, "tool", None) != tool:
                    return result
                return change(result, params)

            return handler

        return override(backend, method, make)

    return broken


# --- tool arguments --------------------------------------------------------------------------------


def tool_arguments(request: ExecutionToolRequestV4) -> WireModel | None:
    """The call's arguments as its tool's model, or None when the worker refuses them itself: an unknown
    tool (`unsupported_tool`) or arguments that break the tool's schema (`invalid_request`)."""
    spec = WORKER_TOOLS.get(request.tool)
    if spec is None:
        return None
    try:
        return spec.arguments.model_validate_json(request.call.arguments, strict=True)
    except ValidationError:
        return None


def with_arguments(request: ExecutionToolRequestV4, arguments: dict[str, Any]) -> ExecutionToolRequestV4:
    """`request` with its call's arguments encoded from `arguments` (their wire form)."""
    call = request.call.model_copy(update={"arguments": orjson.dumps(arguments).decode()})
    return request.model_copy(update={"call": call})


def rewrite_arguments(tool: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Override:
    """An override that runs `execute` of `tool` with the arguments `change(arguments)` returns (both in
    their wire form) in place of the ones asked. Arguments that the tool's schema refuses reach the worker
    unchanged, so they still get `invalid_request`."""

    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        def make(original: Handler) -> Handler:
            async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
                arguments = tool_arguments(request) if request.tool == tool else None
                if arguments is not None:
                    request = with_arguments(request, change(arguments.to_wire()))
                return await original(request, context)

            return handler

        return override(backend, "execute", make)

    return broken


# --- leaks -----------------------------------------------------------------------------------------

_REAPER = """
import os, signal, sys, time
delay, cutoff, groups = float(sys.argv[1]), int(sys.argv[2]), {int(g) for g in sys.argv[3:]}
time.sleep(delay)
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        with open(f"/proc/{name}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        continue
    # fields[2] is the process group, fields[19] the start time (clock ticks after boot).
    if int(fields[2]) in groups and int(fields[19]) <= cutoff:
        try:
            os.kill(int(name), signal.SIGKILL)
        except OSError:
            pass
"""


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def reap_descendants_later(delay: float = 15.0) -> None:
    """Kill, `delay` seconds from now and from a detached process, the process groups of this process's
    descendants (never its own group, which it shares with whoever started it).

    A mutant that leaks process trees on purpose must still not litter the machine that tests it. Only
    processes started before now are killed, so a reused process group id is never hit.
    """
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    own_group = os.getpgid(0)
    groups, stack = set(), list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        groups.add(table[pid][1])
        stack.extend(children.get(pid, []))
    groups.discard(own_group)
    if not groups:
        return
    with open("/proc/uptime", encoding="ascii") as handle:
        uptime = float(handle.read().split()[0])
    cutoff = int((uptime + 1) * os.sysconf("SC_CLK_TCK"))
    subprocess.Popen(
        [sys.executable, "-c", _REAPER, str(delay), str(cutoff), *map(str, sorted(groups))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def exit_now(status: int = 0) -> None:
    """End this process on the spot, nothing drained or cleaned up (its leaks reaped later)."""
    reap_descendants_later()
    os._exit(status)


__all__ = [
    "Frame",
    "Override",
    "Relay",
    "ReplyRewriter",
    "answer_error",
    "code_of",
    "encode",
    "exit_now",
    "frame_of",
    "malformed",
    "override",
    "rewrite_arguments",
    "rewrite_initialize",
    "rewrite_params",
    "rewrite_result",
    "rewrite_results",
    "tool_arguments",
    "with_arguments",
]
