"""Running approved Personal actions through an execution environment, over the v4 worker protocol.

The host owns review and the decision; a worker only executes. `ActionExecutor` keeps one worker connection
for its life, in the environment of an execution profile (spec/schema/config/execution_environments.schema.json):
by default `local`, this installation's native worker on this machine, bound to the Personal files root. Every
call runs in the `standard` permission mode (spec/schema/permissions/permission_modes.schema.json), so the
worker's own boundary, sensitive-path guard and sandbox hold whatever the host checked before. A `docker`,
`ssh` or `command` profile binds its own `workspace` instead; it acts on the files root only when that is
what the profile mounts there.

The worker starts at the first call and again at the first call after it died. A call whose connection ends
before its reply has an `Unknown` outcome: it may have had its effect, and it is never sent again (the worker
protocol's client never retries either). Interactive processes (`process/start` with a stdin pipe) belong to
the connection: never detached, they end with the worker, at `close` at the latest. The executor names each
by a `process_id` of its own, never reused: a later worker's ids may repeat an earlier one's, and input meant
for a process of a worker that died must never reach another.

The `local` environment makes the host process the child subreaper of its tree (`wuu.worker.orphans`): what a
killed worker left running is ended when its environment closes, with every other child the host has left.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_PROTOCOL_VERSION
from wuu.generated.models import (
    Actor,
    ActorKind,
    EditFileArguments,
    ExecCommandArguments,
    ExecutionProcessV4,
    ExecutionToolRequestV4,
    InitializeParams,
    InitializeResult,
    PermissionMode,
    ProcessEventType,
    ProcessStartParams,
    ProcessStatus,
    ProcessWriteParams,
    ToolCall,
    ToolResult,
    WriteFileArguments,
)
from wuu.generated.plain import ExecutionProfile
from wuu.generated.wire import WireModel
from wuu.host.adapter import initialize_interceptor
from wuu.host.backends import Environment, environment_for
from wuu.host.errors import EnvironmentUnavailable, ProfileError
from wuu.host.profiles import Profile, load, parse
from wuu.worker.client import ConnectionLost, ProtocolViolation, ReplyError, WorkerClient
from wuu.worker.errors import CleanupFailed, split_error

from .service import Execution

log = logging.getLogger("wuu.host.userhost.personal.approvals")

DEFAULT_COMMAND_TIMEOUT_MS = 600_000
"""The limit of a command whose arguments give none: ten minutes."""
PERMISSION_MODE = PermissionMode.STANDARD
"""Every Personal action runs in `standard`: inside the bound root, under the OS sandbox."""


@dataclass(frozen=True)
class Completed:
    """The worker ran the call: its result (a command that failed has `is_error`), and for `process/start`
    and `process/write` the process's record, which the result's metadata carries too."""

    result: ToolResult
    process: ExecutionProcessV4 | None = None
    process_id: str | None = None
    """The executor's name of the process, which `process_write` takes (not the worker's record id)."""

    @property
    def exit_code(self) -> int | None:
        """A command's exit status (ExecCommandMetadata, or the process record), when it has one."""
        if self.process is not None:
            return self.process.exit_code
        code = (self.result.metadata or {}).get("exit_code")
        return code if isinstance(code, int) else None


@dataclass(frozen=True)
class Refused:
    """The call did not run: the worker refused it (`code` is its error code, `not_found` also for input to a
    process this worker did not start)."""

    code: str
    message: str


@dataclass(frozen=True)
class Unavailable:
    """The call did not run: no worker could be started in the environment, or the executor is closed."""

    reason: str


@dataclass(frozen=True)
class Unknown:
    """The connection ended with the call in flight (or its reply broke the protocol): it may have had its
    effect. It is never replayed."""

    reason: str


ExecutionChoice = Profile[ExecutionProfile]
"""The execution profile approved actions run in, as the Personal composition is given it."""
Outcome = Completed | Refused | Unavailable | Unknown


class ExecutionConfigError(Exception):
    """The execution configuration of the Personal actions is wrong; the message says where and why."""


def load_profile(config: Path, name: str | None) -> ExecutionChoice:
    """The profile `name` (the file's default when None) of an `execution_environments` configuration file
    (spec/schema/config/execution_environments.schema.json). ExecutionConfigError naming what is wrong."""
    try:
        return load(config).select(name)
    except ProfileError as error:
        raise ExecutionConfigError(str(error)) from None


def configured_profile(environments: Mapping[str, Any], label: str, name: str | None) -> ExecutionChoice:
    """The profile `name` (the default when None) of the `execution_environments` of a user configuration
    (`label` names it in messages). ExecutionConfigError naming what is wrong."""
    try:
        return parse({"execution_environments": environments}, label).select(name)
    except ProfileError as error:
        raise ExecutionConfigError(str(error)) from None


"""What became of one call."""


class _NoWorker(Exception):
    """No worker could be started (the message says why)."""


@dataclass
class _Connection:
    environment: Environment
    client: WorkerClient
    processes: dict[str, str]
    """The running interactive processes started on this connection: the executor's process_id -> the
    worker's id."""
    ended: set[str] = field(default_factory=set)
    """The worker's ids of the processes whose terminal event came (possibly before their start returned)."""
    broken: bool = False
    """The worker broke the protocol: the connection is ended before the next call."""
    watcher: asyncio.Task[None] | None = None

    @property
    def usable(self) -> bool:
        return self.client.lost is None and not self.broken


class ActionExecutor:
    """Runs approved actions through one worker of an execution environment, started lazily."""

    def __init__(
        self,
        files_root: Path,
        *,
        session: str,
        profile: Profile[ExecutionProfile] | None = None,
        actor_id: str = "personal",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """`session`: the worker binding's session (its processes' `root_thread_id`). `profile`: the
        environment, `local` by default. `actor_id`: the agent the calls are made for. `environ`: where the
        profile's `forward_env` variables are read, this process's environment by default."""
        self._profile = profile or parse({}).select()
        # A profile with a workspace of its own binds it; `local` binds the files root itself.
        workspace = getattr(self._profile.settings, "workspace", None)
        self._root = workspace if isinstance(workspace, str) else os.fspath(files_root)
        self._session = session
        self._actor = Actor(kind=ActorKind.AGENT, id=actor_id)
        self._environ = os.environ if environ is None else environ
        self._budget = self._profile.settings.shutdown_timeout_ms / 1000
        self._connection: _Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._process_ended: Callable[[str], None] = lambda process_id: None

    def on_process_end(self, callback: Callable[[str], None]) -> None:
        """Call `callback` with the process_id of each interactive process that ends (exits, is stopped, fails,
        or goes with its worker) while the executor is open."""
        self._process_ended = callback

    # --- the actions ---------------------------------------------------------------------------------

    async def write_file(self, arguments: WriteFileArguments, call_id: str) -> Outcome:
        """Run `write_file`."""
        return await self._execute("write_file", arguments, call_id)

    async def edit_file(self, arguments: EditFileArguments, call_id: str) -> Outcome:
        """Run `edit_file`."""
        return await self._execute("edit_file", arguments, call_id)

    async def exec_command(self, arguments: ExecCommandArguments, call_id: str) -> Outcome:
        """Run a command to completion; DEFAULT_COMMAND_TIMEOUT_MS bounds it when `arguments` give no limit."""
        if arguments.timeout_ms is None:
            arguments = ExecCommandArguments.model_validate(
                {**arguments.to_wire(), "timeout_ms": DEFAULT_COMMAND_TIMEOUT_MS}
            )
        return await self._execute("exec_command", arguments, call_id)

    async def process_start(
        self, argv: list[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None
    ) -> Outcome:
        """Start an interactive process (its stdin a pipe for `process_write`); it ends with the worker."""
        fields: dict[str, object] = {"argv": argv, "permission_mode": PERMISSION_MODE.value, "stdin": True}
        if cwd is not None:
            fields["cwd"] = cwd
        if env:
            fields["env"] = dict(env)
        params = ProcessStartParams.model_validate(fields)

        async def start(connection: _Connection) -> Outcome:
            record = await connection.client.process_start(params)
            failed = record.status is ProcessStatus.FAILED
            if failed:
                return _process_outcome(f"could not start {' '.join(argv)}", True, record, None)
            process_id = f"proc_{secrets.token_hex(16)}"
            if record.id not in connection.ended:
                connection.processes[process_id] = record.id
            return _process_outcome(
                f"started process {process_id}: {' '.join(argv)}", False, record, process_id
            )

        return await self._run(start)

    async def process_write(self, process_id: str, data: str, *, close: bool = False) -> Outcome:
        """Write `data` (UTF-8) to the stdin of a process this worker started; `close` closes it after.

        Input for a process the current worker did not start is Refused with `not_found`, without a call.
        """
        unknown = Refused("not_found", f"process {process_id} was not started by the current worker")
        if not self.knows_process(process_id):
            return unknown  # no worker is started only to refuse
        encoded = data.encode("utf-8")
        data_base64 = base64.b64encode(encoded).decode("ascii")

        async def write(connection: _Connection) -> Outcome:
            worker_id = connection.processes.get(process_id)
            if worker_id is None:  # the worker was replaced meanwhile
                return unknown
            params = ProcessWriteParams(id=worker_id, data=data_base64, close=close)
            record = await connection.client.process_write(params)
            text = f"wrote {len(encoded)} bytes to process {process_id}"
            return _process_outcome(text, False, record, process_id)

        return await self._run(write)

    def knows_process(self, process_id: str) -> bool:
        """Whether `process_id` is an interactive process of the current worker (input for it can be sent)."""
        connection = self._connection
        return connection is not None and connection.usable and process_id in connection.processes

    # --- the worker ----------------------------------------------------------------------------------

    async def close(self) -> None:
        """End the worker and its environment (its processes with it); later calls are Unavailable.

        CleanupFailed when the environment did not end cleanly within the profile's shutdown budget.
        """
        async with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
            if connection is not None:
                await self._end(connection)

    async def _execute(self, tool: str, arguments: WireModel, call_id: str) -> Outcome:
        call = ToolCall(id=call_id, arguments=orjson.dumps(arguments.to_wire()).decode())
        request = ExecutionToolRequestV4(
            tool=tool, call=call, actor=self._actor, permission_mode=PERMISSION_MODE
        )

        async def execute(connection: _Connection) -> Outcome:
            return Completed(await connection.client.execute(request))

        return await self._run(execute)

    async def _run(self, call: Callable[[_Connection], Awaitable[Outcome]]) -> Outcome:
        """`call` on the worker's connection, and what became of it."""
        try:
            connection = await self._connect()
        except _NoWorker as error:
            return Unavailable(str(error))
        try:
            return await call(connection)
        except ReplyError as error:
            return Refused(error.raw_code, split_error(error.wire)[1])
        except ConnectionLost as error:
            return Unknown(f"the worker connection ended during the call: {error}")
        except ProtocolViolation as error:
            connection.broken = True
            return Unknown(f"the worker broke the protocol: {error}")

    async def _connect(self) -> _Connection:
        """The live connection: the current one, else a new worker (after ending one that died)."""
        async with self._lock:
            if self._closed:
                raise _NoWorker("the executor is closed")
            if self._connection is not None and self._connection.usable:
                return self._connection
            dead, self._connection = self._connection, None
            if dead is not None:  # the new worker starts whatever the old one's cleanup says
                await self._end_quietly(dead, "the previous worker")
            self._connection = await self._start()
            return self._connection

    async def _start(self) -> _Connection:
        try:
            environment = environment_for(self._profile)
            forwarded = self._profile.forwarded_environment(self._environ)
        except (EnvironmentUnavailable, ProfileError) as error:
            raise _NoWorker(str(error)) from None
        try:
            reader, writer = await environment.start()
        except (EnvironmentUnavailable, OSError) as error:
            await self._discard(environment)
            raise _NoWorker(f"profile {self._profile.name!r}: the worker did not start: {error}") from None
        except asyncio.CancelledError:
            await self._discard(environment)
            raise
        client = WorkerClient(reader, writer, token=secrets.token_hex(16), record=False)
        connection = _Connection(environment, client, {})
        data = {"version": WORKER_PROTOCOL_VERSION, "root": self._root, "session": self._session}
        profile = self._profile
        rewrite = initialize_interceptor(
            environment, forwarded, profile.file_roots(), no_tcp=profile.no_tcp()
        )
        bound = rewrite(data) or data
        try:
            await client.call("initialize", InitializeParams.model_validate(bound), InitializeResult)
        except (ReplyError, ConnectionLost, ProtocolViolation) as error:
            await self._end_quietly(connection, "the worker that failed to initialize")
            raise _NoWorker(
                f"profile {self._profile.name!r}: the worker refused its binding: {error}"
            ) from None
        except asyncio.CancelledError:
            await self._end_quietly(connection, "the worker whose start was cancelled")
            raise
        connection.watcher = asyncio.create_task(self._watch(connection))
        return connection

    async def _watch(self, connection: _Connection) -> None:
        """Follow the worker's process events: an interactive process that ends is forgotten and reported;
        when the connection ends, so have all its processes."""
        async for event in connection.client.events():
            if event.type is ProcessEventType.STARTED:
                continue
            connection.ended.add(event.process.id)
            for process_id, worker_id in list(connection.processes.items()):
                if worker_id == event.process.id:
                    self._forget(connection, process_id)
        for process_id in list(connection.processes):
            self._forget(connection, process_id)

    def _forget(self, connection: _Connection, process_id: str) -> None:
        del connection.processes[process_id]
        if not self._closed:
            self._process_ended(process_id)

    async def _end(self, connection: _Connection) -> None:
        """EOF to the worker, then its environment's cleanup, each within the profile's shutdown budget."""
        await connection.client.close(self._budget)
        await connection.environment.close(self._budget)
        if connection.watcher is not None:
            await connection.watcher

    async def _end_quietly(self, connection: _Connection, which: str) -> None:
        """`_end` for a worker no caller waits on: a failed cleanup is logged."""
        try:
            await self._end(connection)
        except CleanupFailed as error:
            log.warning("%s did not end cleanly: %s", which, error)

    async def _discard(self, environment: Environment) -> None:
        """The cleanup of an environment whose worker did not start; a failed one is logged."""
        try:
            await environment.close(self._budget)
        except CleanupFailed as error:
            log.warning("the environment whose worker did not start did not end cleanly: %s", error)


def _process_outcome(
    text: str, is_error: bool, record: ExecutionProcessV4, process_id: str | None
) -> Completed:
    return Completed(
        ToolResult(output=text, is_error=is_error, metadata=record.to_wire()), record, process_id
    )


class WorkerActions:
    """The approval service's executor on an `ActionExecutor`: an action's wire JSON in, its `Execution` out,
    and the command lines of the interactive processes it started."""

    def __init__(self, executor: ActionExecutor) -> None:
        self.executor = executor
        self._argv: dict[str, list[str]] = {}

    async def run(self, action: Mapping[str, Any]) -> Execution:
        tool = action["tool"]
        call_id = f"call_{secrets.token_hex(12)}"
        outcome: Outcome
        if tool == "write_file":
            arguments = {key: action[key] for key in ("path", "content", "create_dirs")}
            outcome = await self.executor.write_file(WriteFileArguments.model_validate(arguments), call_id)
        elif tool == "edit_file":
            arguments = {key: action[key] for key in ("path", "old_string", "new_string", "replace_all")}
            outcome = await self.executor.edit_file(EditFileArguments.model_validate(arguments), call_id)
        elif tool == "exec_command":
            arguments = {key: action[key] for key in ("argv", "cwd", "env", "timeout_ms")}
            outcome = await self.executor.exec_command(
                ExecCommandArguments.model_validate(arguments), call_id
            )
        elif tool == "process_start":
            outcome = await self.executor.process_start(
                list(action["argv"]), cwd=action["cwd"], env=action["env"]
            )
            if isinstance(outcome, Completed) and outcome.process_id is not None:
                self._argv[outcome.process_id] = list(action["argv"])
        else:
            outcome = await self.executor.process_write(action["process_id"], action["data"])
        return _execution(outcome)

    def process_argv(self, process_id: str) -> Sequence[str] | None:
        if not self.executor.knows_process(process_id):
            return None
        return self._argv.get(process_id)

    def on_process_end(self, callback: Callable[[str], None]) -> None:
        def ended(process_id: str) -> None:
            self._argv.pop(process_id, None)
            callback(process_id)

        self.executor.on_process_end(ended)


def _execution(outcome: Outcome) -> Execution:
    """What the approval service records of an outcome: nothing ran unless the worker completed the call."""
    if isinstance(outcome, Completed):
        result = outcome.result
        if result.is_error:
            return Execution("failed", result.output, outcome.exit_code, process_id=outcome.process_id)
        return Execution("succeeded", result.output, outcome.exit_code, process_id=outcome.process_id)
    if isinstance(outcome, Refused):
        return Execution("failed", f"the worker refused it: {outcome.message}", error_code=outcome.code)
    if isinstance(outcome, Unavailable):
        return Execution("failed", f"it did not run: {outcome.reason}")
    return Execution("unknown", f"its outcome is unknown: {outcome.reason}")
