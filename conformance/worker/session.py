"""A case's view of one adapter: a fresh process, a fresh workspace root, and checked replies.

Every reply a case receives is validated against the spec: its frame shape, its result schema
for the method, and its error code. Any deviation fails the case, whatever the case checks.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any

from wuu.generated import validators
from wuu.generated.catalog import WORKER_METHODS
from wuu.generated.models import ErrorCode, ProcessEvent, ToolInvokeParams, ToolResult
from wuu.worker.client import ConnectionLost, WorkerClient
from wuu.worker.errors import WorkerError, split_error
from wuu.worker.framing import encode

from ..outcomes import CaseFailed, CaseSkipped, Checks, schema_problem
from ..probe import first_answer

SESSION_ID = "conformance-thread"
ERROR_CODES = frozenset(code.value for code in ErrorCode)
PRIVATE_VARIABLE = "WUU_CONFORMANCE_PRIVATE"
"""A variable that only the adapter's own environment holds: a command it runs must never see it, only what
the binding forwards (`commands.environment`)."""
ECHO_TOOL = "echo"
"""The one tool the conformance host serves to `tool/invoke` callbacks: its output is the arguments text as
sent, its metadata names the parent request. Any other tool is refused `unsupported_tool`."""


def adapter_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an adapter starts with: this process's, the private variable, and `env`."""
    return {**os.environ, PRIVATE_VARIABLE: "leak", **(env or {})}


def code_of(reply: Mapping[str, Any]) -> str | None:
    """The error code of a reply frame, or None for a success."""
    error = reply.get("error")
    return split_error(error)[0] if isinstance(error, str) else None


class Session(Checks):
    """One adapter process for one case.

    The case's directory (`workdir`, the root beneath it) is this machine's, and the runner removes it. An
    adapter whose files live elsewhere (an ssh server, a container) makes its own at the same paths: after a
    case in which it bound a root that is not on this machine, `close` removes the case's directory there too.
    """

    def __init__(self, command: Sequence[str], workdir: Path, timeout: float) -> None:
        self.command = list(command)
        self.workdir = workdir
        self.root = workdir / "root"
        self.timeout = timeout
        self.methods: frozenset[str] = frozenset()
        self.capabilities: frozenset[str] = frozenset()
        self._client: WorkerClient | None = None
        self._mode: str | None = None
        self._root_seen_here = False
        """Whether the root existed on this machine right after an initialize succeeded."""

    @property
    def client(self) -> WorkerClient:
        if self._client is None:
            raise RuntimeError("the session has not started")
        return self._client

    async def start(self, env: Mapping[str, str] | None = None) -> None:
        """Spawn the adapter (with `adapter_environment(env)`)."""
        self._client = await WorkerClient.spawn(
            self.command, env=adapter_environment(env), tool_invoker=self._invoke_tool
        )

    async def probe(self) -> None:
        """Start the adapter once and wait for its answer to `initialize` (StartFailure if none comes); then
        remove the root it made, where that is not here."""
        frame = {"id": "probe", "method": "initialize", "token": "conformance-probe", "data": self.binding()}
        await first_answer(self.command, encode(frame), env=adapter_environment(), timeout=self.timeout)
        if not self.root.exists():
            await self.remove_elsewhere()

    @staticmethod
    async def _invoke_tool(params: ToolInvokeParams, parent: str) -> ToolResult:
        """The host side of a live request's `tool/invoke` (the client refuses a dead parent's itself)."""
        if params.tool != ECHO_TOOL:
            raise WorkerError(ErrorCode.UNSUPPORTED_TOOL, f"the conformance host has no tool {params.tool}")
        return ToolResult(output=params.arguments, is_error=False, metadata={"parent": parent})

    # --- checks ----------------------------------------------------------------------------------

    def require_method(self, method: str) -> None:
        """Skip unless the adapter advertised `method` at initialize."""
        if method not in self.methods:
            raise CaseSkipped(f"the adapter does not advertise {method}")

    def require_capability(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise CaseSkipped(f"the adapter does not grant {capability}")

    # --- requests --------------------------------------------------------------------------------

    def binding(self, **overrides: Any) -> dict[str, Any]:
        return {"version": 4, "root": str(self.root), "session": SESSION_ID, **overrides}

    async def initialize(self, **overrides: Any) -> dict[str, Any]:
        """`initialize` with a fresh binding (plus overrides); fail the case unless it succeeds."""
        data = await self.ok("initialize", self.binding(**overrides))
        self.methods = frozenset(data["methods"])
        self.capabilities = frozenset(data["capabilities"])
        return data

    async def request(
        self,
        method: str,
        data: Mapping[str, Any],
        *,
        token: str | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its checked reply frame."""
        return await self._checked(
            method, self.client.request(method, data, token=token, request_id=request_id)
        )

    async def wait_reply(self, method: str, waiter: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
        """The checked reply of a request sent by hand (`client.expect_reply` + `client.send_frame`)."""
        return await self._checked(method, asyncio.shield(waiter))

    async def _checked(self, method: str, reply_frame: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        """The reply, within the timeout and checked against the spec; a missing one fails the case."""
        try:
            reply = await asyncio.wait_for(reply_frame, self.timeout)
        except TimeoutError:
            raise CaseFailed(f"no reply to {method} within {self.timeout:g} s") from None
        except ConnectionLost as error:
            raise CaseFailed(f"the connection ended during {method}: {error}") from None
        self.check_reply(method, reply)
        return reply

    def check_reply(self, method: str, reply: Mapping[str, Any]) -> None:
        """Fail unless the reply follows the spec: a ReplyFrame, a result of the method's schema, a known code."""
        problems = validators.errors("ReplyFrame", dict(reply))
        if problems:
            raise CaseFailed(f"the reply to {method} is not a ReplyFrame: {schema_problem(problems[0])}")
        if method == "initialize" and "data" in reply:
            self._root_seen_here = self._root_seen_here or self.root.is_dir()
        if "error" in reply:
            code = code_of(reply)
            self.expect(
                code in ERROR_CODES, f"the reply to {method} has an error code the spec does not know: {code}"
            )
            return
        spec = WORKER_METHODS.get(method)
        if spec is not None and spec.result is not None:
            problems = validators.errors(spec.result.__name__, reply["data"])
            if problems:
                raise CaseFailed(
                    f"the result of {method} does not follow {spec.result.__name__}: {schema_problem(problems[0])}"
                )

    async def ok(self, method: str, data: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The result data of a request that must succeed."""
        reply = await self.request(method, data, **kwargs)
        self.expect("data" in reply, f"{method} failed: {reply.get('error')}")
        result: dict[str, Any] = reply["data"]
        return result

    async def error(self, method: str, data: Mapping[str, Any], code: str, **kwargs: Any) -> str:
        """The error string of a request that must fail with `code`."""
        reply = await self.request(method, data, **kwargs)
        actual = code_of(reply)
        self.expect(
            actual == code, f"{method} must fail with {code}; it answered {reply.get('error') or 'success'}"
        )
        return str(reply["error"])

    @staticmethod
    def tool(tool: str, arguments: Mapping[str, Any] | str, mode: str = "standard") -> dict[str, Any]:
        """The data of an `execute` request (arguments given as an object are encoded)."""
        encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {
            "tool": tool,
            "call": {"id": "conformance-call", "arguments": encoded},
            "actor": {"kind": "agent", "id": "conformance"},
            "permission_mode": mode,
        }

    async def execute(self, tool: str, mode: str = "standard", **arguments: Any) -> dict[str, Any]:
        """The reply frame of one `execute`."""
        return await self.request("execute", self.tool(tool, arguments, mode))

    async def command_mode(self) -> str:
        """A permission mode in which this adapter runs commands: `standard` if it sandboxes, else `unconfined`.

        An adapter that cannot sandbox answers confined commands `sandbox_unavailable` (spec), so
        cases that need a process use `unconfined` there. Skips when the adapter runs no commands.
        """
        if self._mode is None:
            reply = await self.execute("exec_command", argv=["true"])
            if code_of(reply) == "sandbox_unavailable":
                self._mode = "unconfined"
            elif code_of(reply) == "unsupported_tool":
                raise CaseSkipped("the adapter does not provide exec_command")
            else:
                self.expect("data" in reply, f"exec_command of `true` failed: {reply.get('error')}")
                self._mode = "standard"
        return self._mode

    # --- the connection's end ----------------------------------------------------------------------

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.client.send_bytes(data)
        except ConnectionLost as error:
            raise CaseFailed(f"the adapter stopped reading: {error}") from None

    async def expect_exit(self, what: str) -> int:
        """Wait for the adapter process to exit; fail if it does not within the timeout."""
        process = self.client.process
        assert process is not None
        try:
            return await asyncio.wait_for(process.wait(), self.timeout)
        except TimeoutError:
            raise CaseFailed(f"the adapter did not exit within {self.timeout:g} s after {what}") from None

    def received(self) -> list[bytes]:
        """Every frame received so far, in order."""
        return self.client.transcript.received_lines()

    def events(self) -> list[ProcessEvent]:
        """The process events received and not yet taken."""
        return self.client.pending_events()

    async def until(self, predicate: Any, what: str, interval: float = 0.02) -> None:
        """Poll `predicate` (sync or async) until it holds; fail after the timeout."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise CaseFailed(f"timed out waiting for {what}")
            await asyncio.sleep(interval)

    def transcript(self) -> str:
        return self.client.transcript.render() if self._client is not None else ""

    async def close(self) -> None:
        """End the adapter (EOF), then remove what it made of the case's directory where that is not here."""
        if self._client is None:
            return
        await self._client.close(budget=self.timeout)
        if self._bound() and not (self._root_seen_here or self.root.exists()):
            await self.remove_elsewhere()

    def _bound(self) -> bool:
        """Whether some `initialize` of this case succeeded (so the adapter may have made a root)."""
        initializes: set[str] = set()
        for direction, line in self.client.transcript.entries:
            frame = _frame(line)
            if frame is None or not isinstance(frame.get("id"), str):
                continue
            if direction == ">" and frame.get("method") == "initialize":
                initializes.add(frame["id"])
            elif (
                direction == "<" and frame["id"] in initializes and "data" in frame and "method" not in frame
            ):
                return True
        return False

    async def remove_elsewhere(self) -> None:
        """Remove the case's directory where the adapter keeps its files, through one more connection: it binds
        the directory, if the adapter has one there, with remove_workspace_on_exit, and ends.

        Best effort (an adapter that fails here has had its verdict): a missing directory is
        `workspace_missing`, so nothing is created, and a worker that keeps its binding across connections
        (a persistent one) refuses it with `binding_immutable`.
        """
        binding = {
            **self.binding(root=str(self.workdir), session=f"{SESSION_ID}-cleanup"),
            "require_existing_workspace": True,
            "remove_workspace_on_exit": True,
        }
        try:
            client = await WorkerClient.spawn(self.command, env=adapter_environment())
        except OSError:
            return
        client.transcript.enabled = False
        try:
            await asyncio.wait_for(client.request("initialize", binding), self.timeout)
        except (TimeoutError, ConnectionLost):
            pass
        finally:
            await client.close(budget=self.timeout)


def _frame(line: bytes) -> dict[str, Any] | None:
    """A transcript line's frame, or None when it is not a JSON object."""
    try:
        frame = json.loads(line)
    except ValueError:
        return None
    return frame if isinstance(frame, dict) else None
