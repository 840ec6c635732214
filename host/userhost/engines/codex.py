"""The Codex adapter: threads of Codex's app server (`codex app-server`: JSON-RPC, one message per line on
stdio) in a Wuu permission mode.

The mode goes to `thread/start` as Codex's sandbox mode and approval policy (CodexPermissionSettings). Codex
answers with the policy and sandbox the thread really has; a thread whose settings differ (Codex's own
configuration can pin them) is not used (`EngineRefused`). With the `on-request` policy Codex asks before a
command or a file change its sandbox would not allow: the adapter puts each request to the host's approval
bridge and answers `accept` (this request only) or `decline`. Any other request from Codex (user input, extra
permissions, tool calls) is answered with an error: this client offers none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from wuu.generated.models import ExternalEngine, PermissionMode

from . import programs
from .table import (
    ApprovalBridge,
    EngineApproval,
    EngineFailed,
    EngineRefused,
    EngineTurn,
    ask_bridge,
    settings_for,
)

CLIENT_INFO = {"name": "wuu", "title": "Wuu", "version": "0.1.0"}
SANDBOX_TYPES = {
    "read-only": "readOnly",
    "workspace-write": "workspaceWrite",
    "danger-full-access": "dangerFullAccess",
}
"""How `thread/start`'s answer spells each sandbox mode (its `sandbox.type`)."""
APPROVALS = ("item/commandExecution/requestApproval", "item/fileChange/requestApproval")
"""The requests Codex sends under `on-request`, decided by the host's approval bridge."""
METHOD_NOT_FOUND = -32601


class _Connection:
    """A JSON-RPC connection to a running app server: requests out, and Codex's requests and notifications in."""

    def __init__(self, process: asyncio.subprocess.Process, answer: Any) -> None:
        self._process = process
        self._answer = answer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.notifications: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader = asyncio.create_task(self._read())

    async def request(self, method: str, params: Mapping[str, Any]) -> Any:
        """Codex's result of `method`; EngineFailed with its error, or when it exits first."""
        number = next(self._ids)
        reply = asyncio.get_running_loop().create_future()
        self._pending[number] = reply
        await self._send({"id": number, "method": method, "params": dict(params)})
        return await reply

    async def notify(self, method: str) -> None:
        await self._send({"method": method})

    async def _send(self, message: Mapping[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        await self._process.stdin.drain()

    async def _read(self) -> None:
        assert self._process.stdout is not None
        async for message in programs.json_lines(self._process.stdout):
            if "method" in message and "id" in message:
                task = asyncio.create_task(self._serve(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif "method" in message:
                self.notifications.put_nowait(message)
            elif isinstance(ident := message.get("id"), int) and (reply := self._pending.pop(ident, None)):
                if reply.done():  # its caller was cancelled
                    continue
                if "error" in message:
                    reply.set_exception(EngineFailed(f"Codex answered an error: {message['error']}"))
                else:
                    reply.set_result(message.get("result"))
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(EngineFailed("Codex's app server exited"))
        self.notifications.put_nowait(None)

    async def _serve(self, message: dict[str, Any]) -> None:
        result = await self._answer(message["method"], message.get("params") or {})
        if result is None:
            error = {
                "code": METHOD_NOT_FOUND,
                "message": f"{message['method']} is not offered by this client",
            }
            await self._send({"id": message["id"], "error": error})
        else:
            await self._send({"id": message["id"], "result": result})

    async def close(self) -> None:
        self._reader.cancel()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class CodexThread:
    """One Codex thread, in the permission mode it was started in."""

    def __init__(self, connection: _Connection, thread_id: str) -> None:
        self._connection = connection
        self.thread_id = thread_id

    async def prompt(self, text: str) -> EngineTurn:
        """Run one turn on `text` and wait for its end: the agent's messages, and the turn's status."""
        started = await self._connection.request(
            "turn/start", {"threadId": self.thread_id, "input": [{"type": "text", "text": text}]}
        )
        turn_id = started["turn"]["id"]
        said: list[str] = []
        while (message := await self._connection.notifications.get()) is not None:
            params = message.get("params") or {}
            if message["method"] == "item/completed" and params.get("turnId") == turn_id:
                item = params.get("item") or {}
                if item.get("type") == "agentMessage":
                    said.append(str(item.get("text", "")))
            elif message["method"] == "turn/completed" and params.get("turn", {}).get("id") == turn_id:
                return EngineTurn("\n".join(said), str(params["turn"].get("status")))
        raise EngineFailed("Codex's app server exited during a turn")


class CodexEngine:
    """Starts Codex threads (`command`: the argv of the `codex` CLI; `config`: `key=value` overrides passed as
    `-c`, such as a model provider) in a permission mode."""

    def __init__(
        self,
        command: Sequence[str] = ("codex",),
        *,
        config: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not command:
            raise ValueError("command: the codex CLI's argv is empty")
        self.command = list(command)
        self.config = list(config)
        self.env = dict(os.environ if env is None else env)

    def argv(self) -> list[str]:
        """The app server's command line (the mode goes with each thread, not here)."""
        return [
            *self.command,
            "app-server",
            *itertools.chain.from_iterable(("-c", item) for item in self.config),
        ]

    @asynccontextmanager
    async def open(
        self, mode: PermissionMode, cwd: Path, bridge: ApprovalBridge
    ) -> AsyncIterator[CodexThread]:
        """Start the app server and a thread in `cwd` in `mode`: the thread, until the block ends and the
        server is stopped. EngineRefused when Codex starts the thread with other settings."""
        settings = settings_for(mode).codex

        async def answer(method: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
            if method not in APPROVALS:
                return None
            command = params.get("command")
            title = str(command) if command else str(params.get("reason") or method)
            allowed = await ask_bridge(
                bridge, EngineApproval(ExternalEngine.CODEX, mode, title, dict(params))
            )
            return {"decision": "accept" if allowed else "decline"}

        with tempfile.TemporaryFile() as stderr:
            process = await programs.start(self.argv(), cwd, self.env, stderr, stdin=True)
            connection = _Connection(process, answer)
            try:
                thread = await _start(
                    connection, cwd, settings.sandbox_mode.value, settings.approval_policy.value
                )
                yield thread
            except EngineFailed as error:
                raise EngineFailed(f"{error}; Codex said: {programs.said(stderr)}") from None
            finally:
                await connection.close()
                await programs.stop(process)


async def _start(connection: _Connection, cwd: Path, sandbox: str, approvals: str) -> CodexThread:
    await connection.request("initialize", {"clientInfo": CLIENT_INFO})
    await connection.notify("initialized")
    started = await connection.request(
        "thread/start", {"cwd": str(cwd), "sandbox": sandbox, "approvalPolicy": approvals, "ephemeral": True}
    )
    got = (started.get("sandbox", {}).get("type"), started.get("approvalPolicy"))
    if got != (SANDBOX_TYPES[sandbox], approvals):
        raise EngineRefused(
            f"Codex started the thread with sandbox {got[0]!r} and approval policy {got[1]!r}, "
            f"not {SANDBOX_TYPES[sandbox]!r} and {approvals!r}"
        )
    return CodexThread(connection, started["thread"]["id"])
