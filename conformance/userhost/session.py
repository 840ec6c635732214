"""A case's view of one user host: a fresh host process with a fresh home, and checked connections.

The command under test is given as a template. Before it is run, these placeholders are replaced wherever
they occur in its arguments (each case gets fresh values):

- `{home}`: an empty private directory for the host's data (its home).
- `{user_space}`: the user space to bind, `conformance`.
- `{product_domain}`: the product domain to bind: `personal`, or the one `wuu-conformance run --product-domain`
  names (a `coding` host, say, which serves no Personal plugin: its Personal cases are skipped).
- `{socket}`: the path of a Unix socket the host should also listen on, in a private directory. A command
  that does not take `{socket}` serves only its stdio, and the cases that need several clients are skipped.
- `{isolation}`: the isolation mode the host is started in (spec/schema/userhost/initialize.schema.json,
  `UserHostIsolationMode`): `logical_memory`, but `verified_host` in the case that checks the refusal of an
  unverified host. A command that does not take `{isolation}` skips that case.

The host serves the user-host RPC on its stdin and stdout (the case's first client). The reference host is

    wuu-userhost serve --home {home} --user-space {user_space} --product-domain {product_domain}
        --composition-profile personal --isolation {isolation} --stdio --listen unix:{socket}

and a third-party host is wrapped in one line, for example `sh -c 'exec my-host --data "$0" --socket "$1"'
{home} {socket}`. The Personal cases run when `initialize` lists the plugin `wuu.personal`, and are skipped
with that reason when it does not; a case that needs an optional Personal method is skipped when the host
answers it `unsupported_method`. A case may stop or kill the host and start the command again on the same
`{home}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from wuu.generated.catalog import USERHOST_METHODS, USERHOST_PROTOCOL_VERSION
from wuu.generated.models import UserHostIsolationMode

from ..outcomes import CaseFailed, CaseSkipped, Checks
from ..probe import first_answer
from .connection import READ_LIMIT, Connection, Message, RequestId, code_of, field_of

USER_SPACE = "conformance"
PRODUCT_DOMAIN = "personal"
"""What `{product_domain}` stands for unless the run names another."""
PERSONAL = "wuu.personal"
RECEIPTS = "wuu.client-input-receipts"
CLIENT_INFO = {"name": "wuu-conformance", "version": "1"}
STDERR_SHOWN = 40
LOGICAL_MEMORY = UserHostIsolationMode.LOGICAL_MEMORY.value
"""What `{isolation}` stands for unless a case asks for another mode."""


def initialize_params(**overrides: Any) -> dict[str, Any]:
    """The params of a valid `initialize`, with overrides."""
    return {"protocol_version": USERHOST_PROTOCOL_VERSION, "client_info": CLIENT_INFO, **overrides}


def initialize_line() -> bytes:
    """A valid `initialize` request with id 1, as the line a client writes."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
    return json.dumps(message).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class Attempt:
    """How a start of the command on a home of its own went (`HostSession.attempt`)."""

    home: Path
    """The home it was given: empty and private before the start."""
    status: int | None
    """Its exit status, or None when it was still running at the end of the wait (it was then killed)."""
    answer: bytes
    """The first line it wrote on its stdout after an `initialize` (b"" when it wrote none)."""
    stderr: str
    """Everything it wrote on its stderr."""


class HostSession(Checks):
    """One host for one case: the process of the command under test, started again when a case asks."""

    def __init__(
        self, command: Sequence[str], workdir: Path, timeout: float, product_domain: str = PRODUCT_DOMAIN
    ) -> None:
        self.template = list(command)
        self.product_domain = product_domain
        """The product domain the host is bound to (`{product_domain}`)."""
        self.workdir = workdir
        self.timeout = timeout
        self.home = workdir / "home"
        self.socket_path = workdir / "run" / "userhost.sock"
        self.has_socket = any("{socket}" in argument for argument in command)
        self.has_isolation = any("{isolation}" in argument for argument in command)
        self.command = self.fill(self.home, self.socket_path, LOGICAL_MEMORY)
        """The command as the case's host runs it, every time it is started."""
        self.process: asyncio.subprocess.Process | None = None
        self._main: Connection | None = None
        self._connections: list[Connection] = []
        self._entries: list[tuple[str, str, bytes]] = []
        self._logs: list[tuple[str, Path]] = []
        self.initialized: dict[str, Any] = {}
        """The result of the first client's `initialize`, once it has succeeded (since the last start)."""

    def fill(self, home: Path, socket: Path, isolation: str) -> list[str]:
        """The command with every placeholder replaced (the home, socket and isolation mode given)."""
        values = {
            "{home}": str(home),
            "{user_space}": USER_SPACE,
            "{product_domain}": self.product_domain,
            "{socket}": str(socket),
            "{isolation}": isolation,
        }
        filled = []
        for argument in self.template:
            for placeholder, value in values.items():
                argument = argument.replace(placeholder, value)
            filled.append(argument)
        return filled

    def _prepare(self) -> None:
        self.home.mkdir(mode=0o700)
        self.socket_path.parent.mkdir(mode=0o700)

    # --- the process -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the host on a fresh home; its stdio is the first client."""
        self._prepare()
        await self._spawn("the host")

    async def restart(self) -> None:
        """Start the command again on the same home once the host has ended (`stop`, `kill`): a new first
        client on its stdio, not yet initialized."""
        assert self.process is not None and self.process.returncode is not None, "the host still runs"
        self._note("the command is started again on the same home")
        await self._spawn(f"the host (start {len(self._logs) + 1})")

    async def _spawn(self, what: str) -> None:
        log = self.workdir / f"stderr-{len(self._logs) + 1}.log"
        self._logs.append((what, log))
        stderr = open(log, "wb")  # noqa: SIM115 - the child keeps it
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                limit=READ_LIMIT,
                start_new_session=True,
            )
        finally:
            stderr.close()
        assert self.process.stdin is not None and self.process.stdout is not None
        label = f"#{len(self._connections) + 1}"
        self._main = self._add(Connection(label, self.process.stdout, self.process.stdin, self._record))
        self.initialized = {}

    async def probe(self) -> None:
        """Start the host once and wait for its answer to `initialize` (StartFailure if none comes)."""
        self._prepare()
        await first_answer(self.command, initialize_line(), env=os.environ, timeout=self.timeout)

    async def kill(self) -> None:
        """Kill the host at once (SIGKILL to its process group) and wait until it has ended."""
        process = self._running()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        self._note("the host is killed (SIGKILL)")
        await self.exited("SIGKILL")

    async def stop(self) -> None:
        """Stop the host as its operator does: EOF on every client, then SIGTERM (SIGKILL after the timeout);
        wait until it has ended."""
        self._running()
        self._note("the host is stopped (EOF on every client, then SIGTERM)")
        await self._end()

    def _running(self) -> asyncio.subprocess.Process:
        process = self.process
        assert process is not None and process.returncode is None, "the host is not running"
        return process

    async def attempt(self, isolation: str) -> Attempt:
        """Start the command once more, beside the case's host, on a new empty home and socket path with
        `{isolation}` replaced by `isolation`, and write an `initialize` to it: how that went once it has
        answered or exited, or at the timeout. The process is ended before this returns."""
        number = len(self._logs) + 1
        home = self.workdir / f"home-{number}"
        home.mkdir(mode=0o700)
        command = self.fill(home, self.socket_path.with_name(f"userhost-{number}.sock"), isolation)
        log = self.workdir / f"stderr-{number}.log"
        self._logs.append((f"the {isolation} start", log))
        self._note(f"the command is started on a new home with {{isolation}} {isolation}")
        with open(log, "wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                limit=READ_LIMIT,
                start_new_session=True,
            )
        assert process.stdin is not None and process.stdout is not None
        label = f"#{number} ({isolation})"
        answer = b""
        try:
            with contextlib.suppress(ConnectionError):
                self._record(label, ">", initialize_line())
                process.stdin.write(initialize_line())
                await process.stdin.drain()
            with contextlib.suppress(TimeoutError):
                answer = await asyncio.wait_for(process.stdout.readline(), self.timeout)
                if answer:
                    self._record(label, "<", answer)
                else:  # its stdout ended: it is exiting
                    await asyncio.wait_for(process.wait(), self.timeout)
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            status = process.returncode
            await process.wait()
        return Attempt(home, status, answer, log.read_text("utf-8", "replace"))

    def _add(self, connection: Connection) -> Connection:
        self._connections.append(connection)
        return connection

    def _record(self, label: str, direction: str, data: bytes) -> None:
        self._entries.append((label, direction, data[:4096]))

    def _note(self, text: str) -> None:
        """A line of the transcript that says what the case did to the host."""
        self._entries.append(("==", "", text.encode("utf-8")))

    @property
    def main(self) -> Connection:
        """The first client: the host's stdio (of its latest start)."""
        if self._main is None:
            raise RuntimeError("the session has not started")
        return self._main

    async def connect(self) -> Connection:
        """A new client on the host's Unix socket (skips when the command takes no `{socket}`)."""
        if not self.has_socket:
            raise CaseSkipped("the command under test takes no {socket}: it serves one client only")
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(str(self.socket_path), limit=READ_LIMIT)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if self.process is not None and self.process.returncode is not None:
                    what = (
                        f"the host exited (status {self.process.returncode}) without listening on its socket"
                    )
                    raise CaseFailed(what) from None
                if asyncio.get_running_loop().time() > deadline:
                    what = f"the host did not listen on {self.socket_path} within {self.timeout:g} s"
                    raise CaseFailed(what) from None
                await asyncio.sleep(0.02)
        return self._add(Connection(f"#{len(self._connections) + 1}", reader, writer, self._record))

    async def exited(self, what: str) -> int:
        """Wait for the host process to exit; fail if it does not within the timeout."""
        assert self.process is not None
        try:
            return await asyncio.wait_for(self.process.wait(), self.timeout)
        except TimeoutError:
            raise CaseFailed(f"the host did not exit within {self.timeout:g} s after {what}") from None

    def transcript(self) -> str:
        """Every message sent and received, by connection; then the end of the host's stderr (of each
        start)."""
        lines = []
        for label, direction, data in self._entries:
            text = data.decode("utf-8", "replace").rstrip("\n")
            where = f"{label} {direction}" if direction else label
            lines.append(f"{where} {text[:2000]}{' ...' if len(text) > 2000 else ''}")
        for what, log in self._logs:
            with contextlib.suppress(OSError):
                stderr = log.read_text("utf-8", "replace").splitlines()
                if stderr:
                    lines.append(f"{what}'s stderr (last {min(len(stderr), STDERR_SHOWN)} lines):")
                    lines.extend("  " + line for line in stderr[-STDERR_SHOWN:])
        return "\n".join(lines)

    async def close(self) -> None:
        """End every connection and the host: EOF first, then SIGTERM, then SIGKILL after the timeout."""
        await self._end()
        for connection in self._connections:
            await connection.close()

    async def _end(self) -> None:
        for connection in self._connections:
            connection.close_output()
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 0 if self.has_socket else min(self.timeout, 5))
            for number in (signal.SIGTERM, signal.SIGKILL):
                if process.returncode is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, number)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), self.timeout)

    # --- checks ----------------------------------------------------------------------------------

    def unserved(self, method: str, message: Message) -> bool:
        """Whether `message`, the response to a Personal call of `method`, says that the host does not serve
        the method: `unsupported_method` for a method the catalog marks optional (a host may omit it)."""
        spec = USERHOST_METHODS.get(method)
        return spec is not None and spec.optional and code_of(message) == "unsupported_method"

    def needs(self, method: str) -> NoReturn:
        """Skip the case: it needs the optional Personal method `method`, which the host does not serve."""
        raise CaseSkipped(
            f"the host does not serve {method} (optional in spec/methods/userhost.json: it answers "
            "unsupported_method), and this case needs it"
        )

    def without_receipts(self, message: Message) -> None:
        """Skip the case when `message`, a response to `agents.send`, is `input_receipts_unavailable`: the
        host's composition does not select the `wuu.client-input-receipts` observer, so it admits no input
        (spec/schema/userhost/personal.schema.json, `AgentsSendParams`), and the case needs an admitted one."""
        if code_of(message) == "input_receipts_unavailable":
            self.skip(
                f"the host's composition does not select {RECEIPTS} (agents.send answered "
                "input_receipts_unavailable): it admits no input, and this case needs one"
            )

    def check(self) -> None:
        """Fail the case if any message received so far broke the spec."""
        for connection in self._connections:
            if connection.problems:
                raise CaseFailed(connection.problems[0])

    @property
    def serves_personal(self) -> bool:
        """Whether the first client's inventory lists `wuu.personal`."""
        return any(entry["plugin_id"] == PERSONAL for entry in self.initialized.get("plugins", []))

    def personal(self) -> str:
        """The fingerprint of `wuu.personal` in the first client's inventory; skips when it is absent."""
        for entry in self.initialized.get("plugins", []):
            if entry["plugin_id"] == PERSONAL:
                return str(entry["fingerprint"])
        raise CaseSkipped(f"the host's inventory has no {PERSONAL}: the Personal cases do not apply")

    # --- requests --------------------------------------------------------------------------------

    async def response(self, waiter: asyncio.Future[Message], what: str) -> Message:
        """The checked response a future gets; a missing one fails the case."""
        try:
            message = await asyncio.wait_for(asyncio.shield(waiter), self.timeout)
        except TimeoutError:
            self.check()  # a response the host sent wrongly (a wrong id, say) explains the wait
            raise CaseFailed(f"no response to {what} within {self.timeout:g} s") from None
        except EOFError:
            self.check()
            raise CaseFailed(f"the host closed the connection before answering {what}") from None
        self.check()
        return message

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on: Connection | None = None,
        request_id: RequestId | None = None,
    ) -> Message:
        """Send one request and return its checked response."""
        connection = on or self.main
        return await self.response(await connection.request(method, params, request_id=request_id), method)

    async def ok(self, method: str, params: Any = None, *, on: Connection | None = None) -> dict[str, Any]:
        """The result of a request that must succeed."""
        message = await self.request(method, params, on=on)
        self.expect("result" in message, f"{method} failed: {message.get('error')}")
        result: dict[str, Any] = message["result"]
        return result

    async def error(
        self,
        method: str,
        params: Any,
        code: str,
        *,
        on: Connection | None = None,
        field: str | None = None,
        request_id: RequestId | None = None,
    ) -> Message:
        """The error response of a request that must fail with `code` (and name `field`, when given)."""
        message = await self.request(method, params, on=on, request_id=request_id)
        self.expect_error(message, code, method, field)
        return message

    def expect_error(self, message: Message, code: str, what: str, field: str | None = None) -> None:
        """Fail unless `message` is an error response with `code` (naming `field`, when given)."""
        actual = code_of(message)
        self.expect(
            actual == code, f"{what} must fail with {code}; it answered {message.get('error') or 'success'}"
        )
        if field is not None:
            self.expect(
                field_of(message) == field,
                f"{what} must name the field {field!r} in error.data.field; it named {field_of(message)!r}",
            )

    async def initialize(self, *, on: Connection | None = None, **overrides: Any) -> dict[str, Any]:
        """`initialize` (valid params plus overrides); fails the case unless it succeeds."""
        result = await self.ok("initialize", initialize_params(**overrides), on=on)
        if on is None or on is self._main:
            self.initialized = result
        return result

    async def client(self) -> Connection:
        """A new initialized client on the host's socket."""
        connection = await self.connect()
        await self.initialize(on=connection)
        return connection

    # --- Personal calls ----------------------------------------------------------------------------

    def plugin_params(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        user_input: Mapping[str, Any] | None = None,
        fingerprint: str | None = None,
    ) -> dict[str, Any]:
        """The params of a `plugin/client/request` to `wuu.personal`."""
        request: dict[str, Any] = {"plugin_id": PERSONAL, "method": method, "params": dict(params)}
        if user_input is not None:
            request["user_input"] = dict(user_input)
        if fingerprint is not None:
            request["plugin_fingerprint"] = fingerprint
        return request

    async def call(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        user_input: Mapping[str, Any] | None = None,
        on: Connection | None = None,
    ) -> Message:
        """The checked response of a Personal plugin call."""
        request = self.plugin_params(method, params, user_input=user_input)
        return await self.request("plugin/client/request", request, on=on)

    async def call_ok(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        user_input: Mapping[str, Any] | None = None,
        on: Connection | None = None,
    ) -> dict[str, Any]:
        """The plugin method's result of a Personal call that must succeed (skips when the host does not
        serve the optional method)."""
        message = await self.call(method, params, user_input=user_input, on=on)
        if self.unserved(method, message):
            self.needs(method)
        self.expect("result" in message, f"{method} failed: {message.get('error')}")
        result: dict[str, Any] = message["result"]["result"]
        return result

    async def call_error(
        self,
        method: str,
        params: Mapping[str, Any],
        code: str,
        *,
        user_input: Mapping[str, Any] | None = None,
        field: str | None = None,
        on: Connection | None = None,
    ) -> Message:
        """The error response of a Personal call that must fail with `code` (naming `field`, when given);
        skips when the host does not serve the optional method."""
        message = await self.call(method, params, user_input=user_input, on=on)
        if code != "unsupported_method" and self.unserved(method, message):
            self.needs(method)
        self.expect_error(message, code, method, field)
        return message

    async def main_session(self, *, on: Connection | None = None) -> str:
        """The main session's id (`agents.main_session`)."""
        result = await self.call_ok("agents.main_session", {}, on=on)
        return str(result["session_id"])
