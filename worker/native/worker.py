"""The native reference worker: every core tool, background processes and exports, on this machine.

Tools (the file tools, the search tools, the Git tools) resolve their paths inside the bound root in
`standard` and `read_only`, refuse sensitive paths in every mode, and run commands under Landlock in the
confined modes, never unconfined in their place (spec: execute.schema.json, search.schema.json, git.schema.json).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MIN_RETAINED_OUTPUT_BYTES
from wuu.generated.plain import (
    WORKER_TOOLS,
    CommandNetwork,
    EditFileArguments,
    EmptyResult,
    ErrorCode,
    ExecCommandArguments,
    ExecutionProcessV4,
    ExecutionToolRequestV4,
    ExportCloseParams,
    ExportOpenParams,
    ExportOpenResult,
    ExportReadParams,
    ExportReadResult,
    FileRoot,
    FileRootKind,
    GitBranchArguments,
    InitializeParams,
    Invalid,
    ListDirArguments,
    PermissionMode,
    PlainModel,
    ProcessEvent,
    ProcessGetParams,
    ProcessListParams,
    ProcessListResult,
    ProcessReadParams,
    ProcessReadResult,
    ProcessStartParams,
    ProcessStopParams,
    ProcessWriteParams,
    ReadFileArguments,
    SearchContentArguments,
    SearchFilesArguments,
    ToolResult,
    WorkerInfo,
    WriteFileArguments,
)

from ..backend import ExecutionBackendV4, RequestContext
from ..binding import same_workspace_binding
from ..errors import WorkerError
from . import files
from .environment import command_environment
from .exports import Exports
from .paths import Resolved, resolve_tool_path
from .processes import ProcessRegistry, run_command
from .redaction import default_redactor
from .run_code import CodeRunner
from .sandbox import Sandbox, SandboxPolicy, SandboxUnavailable, open_sandbox
from .sandbox_extension import ExtensionSandbox
from .sensitive import SensitivePaths, default_home, default_wuu_home
from .spawner import Spawner

VERSION = "0.1.0"
CAPABILITIES = ("process.start.v1",)
# Unconfined commands start on the event loop's thread.
UNCONFINED = Spawner()
# The tail of an `exec_command`'s output its result carries: the smallest retention a process may have,
# so that a result stays far below the frame limit.
EXEC_OUTPUT_BYTES = WORKER_MIN_RETAINED_OUTPUT_BYTES


class NativeWorker:
    """The state of one connection of the native worker."""

    def __init__(self, environ: dict[str, str] | None = None, *, new_environment: bool = False) -> None:
        """A worker with `environ` as its own environment (default: this process's). `new_environment`:
        the environment was made for this connection, so a binding that requires an existing workspace
        expects retained state that is not there, and is refused."""
        environ = dict(os.environ if environ is None else environ)
        self._new_environment = new_environment
        self._environ = environ
        self._home = default_home(environ)
        self._sensitive = SensitivePaths.load(home=self._home, wuu_home=default_wuu_home(environ))
        self._binding: InitializeParams | None = None
        self._root = Path("/")
        self._file_roots: tuple[FileRoot, ...] = ()
        self._scope: tuple[Path, ...] = ()
        """The file roots' paths, where an absolute tool path may resolve beside the root."""
        self._private: Path | None = None
        self._processes: ProcessRegistry | None = None
        self._exports: Exports | None = None
        self._sandboxes: dict[PermissionMode, Sandbox | ExtensionSandbox] = {}
        self._emit: Callable[[ProcessEvent], None] | None = None

    def backend(self, *, persistent: bool = False) -> ExecutionBackendV4:
        """This worker as an SDK backend for one connection.

        A persistent worker outlives the connection: at its end the worker only detaches, keeping
        its processes and their output for the next connection (see daemon.py).
        """
        methods: dict[str, Callable[[Any, RequestContext], Any]] = {
            "execute": self.execute,
            "process/start": self.process_start,
            "process/list": self.process_list,
            "process/get": self.process_get,
            "process/read": self.process_read,
            "process/stop": self.process_stop,
            "process/write": self.process_write,
            "export/open": self.export_open,
            "export/read": self.export_read,
            "export/close": self.export_close,
            "run_code": CodeRunner(self._program_confinement, EXEC_OUTPUT_BYTES),
        }
        return ExecutionBackendV4(
            initialize=self.initialize,
            methods=methods,
            close=self.detach if persistent else self.close,
            capabilities=CAPABILITIES,
            info=WorkerInfo(name="wuu-native-worker", version=VERSION),
        )

    # --- lifetime ------------------------------------------------------------------------------

    async def initialize(self, params: InitializeParams, context: RequestContext) -> None:
        if self._binding is not None:
            # A later connection to a persistent worker: the same binding finds the same state.
            if not same_workspace_binding(self._binding, params):
                raise WorkerError(ErrorCode.BINDING_IMMUTABLE, "this worker is bound to another workspace")
            if params.require_existing_workspace:
                _directory(self._root, "root", must_exist=True)
                for index, each in enumerate(self._file_roots):
                    _directory(Path(each.path), f"file_roots.{index}.path", must_exist=True)
            self._emit = context.emit_process
            return
        file_roots = tuple(params.file_roots or ())
        wuu_homes = [index for index, each in enumerate(file_roots) if each.kind is FileRootKind.WUU_HOME]
        if len(wuu_homes) > 1:
            raise WorkerError(
                ErrorCode.INVALID_REQUEST, f"file_roots.{wuu_homes[1]}.kind: a second wuu_home (at most one)"
            )
        if self._new_environment and params.require_existing_workspace:
            raise WorkerError(
                ErrorCode.WORKSPACE_MISSING,
                "require_existing_workspace: this environment was made for this connection, so the retained "
                "environment the binding expects is missing; it was not replaced with an empty one",
            )
        root = _directory(Path(params.root), "root", params.require_existing_workspace)
        for index, each in enumerate(file_roots):
            _directory(Path(each.path), f"file_roots.{index}.path", params.require_existing_workspace)
        self._binding = params
        self._root = root
        self._file_roots = file_roots
        self._scope = tuple(Path(each.path) for each in file_roots)
        if wuu_homes:
            self._sensitive = self._sensitive.with_wuu_home(Path(file_roots[wuu_homes[0]].path))
        self._private = Path(tempfile.mkdtemp(prefix="wuu-worker-"))
        (self._private / "tmp").mkdir()
        (self._private / "exports").mkdir()
        self._emit = context.emit_process
        self._processes = ProcessRegistry(params.session, self._publish)
        self._exports = Exports(self._private / "exports")

    def _publish(self, event: ProcessEvent) -> None:
        """Send a process event on the connection currently attached, if any."""
        if self._emit is not None:
            self._emit(event)

    async def detach(self) -> None:
        """The end of one connection of a persistent worker: its processes keep running."""
        self._emit = None

    async def close(self) -> None:
        """Stop every owned process tree, drop snapshots and the private directory, honour the retention flag.

        A failed process cleanup preserves the workspace, so that it can be inspected; the first
        cleanup error is raised once every other step has run.
        """
        errors: list[BaseException] = []
        processes_stopped = True
        if self._processes is not None:
            try:
                await self._processes.close()
            except Exception as error:
                processes_stopped = False
                errors.append(error)
        for sandbox in self._sandboxes.values():
            sandbox.close()
        if self._exports is not None:
            self._exports.close_all()
        removals = [self._private] if self._private is not None else []
        if self._binding is not None and self._binding.remove_workspace_on_exit and processes_stopped:
            removals.append(self._root)
        for directory in removals:
            try:
                shutil.rmtree(directory)
            except OSError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    # --- execute -------------------------------------------------------------------------------

    async def execute(self, request: ExecutionToolRequestV4, context: RequestContext) -> ToolResult:
        spec = WORKER_TOOLS.get(request.tool)
        if spec is None:
            raise WorkerError(ErrorCode.UNSUPPORTED_TOOL, request.tool)
        arguments = _tool_arguments(spec.arguments, request.call.arguments)
        mode = request.permission_mode
        if spec.mutating and mode is PermissionMode.READ_ONLY:
            raise WorkerError(
                ErrorCode.PERMISSION_DENIED, f"{request.tool} changes files; the mode is read_only"
            )
        if isinstance(arguments, ExecCommandArguments):
            return await self._exec_command(arguments, mode)
        if isinstance(arguments, ReadFileArguments):
            return files.read_file(self._path(arguments.path, mode, write=False), arguments)
        if isinstance(arguments, WriteFileArguments):
            return files.write_file(self._path(arguments.path, mode, write=True), arguments)
        if isinstance(arguments, EditFileArguments):
            return files.edit_file(self._path(arguments.path, mode, write=True), arguments)
        if isinstance(arguments, ListDirArguments):
            return files.list_dir(self._path(arguments.path, mode, write=False), arguments)
        # The search and Git tools load on their first call: a worker that never searches or runs Git never
        # pays for their modules, nor does any worker's start-up.
        if isinstance(arguments, SearchContentArguments):
            from . import search

            return await search.search_content(
                self._path(arguments.path, mode, write=False),
                arguments,
                root=self._root,
                sensitive=self._sensitive,
                redactor=default_redactor(),
            )
        if isinstance(arguments, SearchFilesArguments):
            from . import search

            return await search.search_files(
                self._path(arguments.path, mode, write=False), arguments, root=self._root
            )
        if request.tool.startswith("git_"):
            from . import git

            assert isinstance(arguments, git.GitArguments)
            if (
                isinstance(arguments, GitBranchArguments)
                and arguments.create
                and mode is PermissionMode.READ_ONLY
            ):
                raise WorkerError(
                    ErrorCode.PERMISSION_DENIED,
                    "git_branch create changes the repository; the mode is read_only",
                )
            return await git.GitTools(self._sensitive, default_redactor()).call(
                self._path(arguments.path, mode, write=False), arguments, home=self._home
            )
        raise WorkerError(ErrorCode.UNSUPPORTED_TOOL, request.tool)

    def _path(self, path: str, mode: PermissionMode, *, write: bool) -> Resolved:
        """Resolve a tool path under the mode's boundary and the sensitive-path guard."""
        confined = mode is not PermissionMode.UNCONFINED
        resolved = resolve_tool_path(self._root, path, confined=confined, write=write, file_roots=self._scope)
        requested = Path(os.path.normpath(Path(path) if os.path.isabs(path) else self._root / path))
        # Both the name asked and the path acted on: `notes -> .env` (dangling or not) writes `.env`.
        self._sensitive.check(requested, write=write, acts_on=resolved.path)
        # And the file opened: a hard link to Wuu's auth.json is that file under another name.
        return dataclasses.replace(
            resolved,
            check_opened=lambda opened, writes: self._sensitive.check_opened(opened, requested, write=writes),
        )

    def _command_setup(
        self, cwd: str | None, env: dict[str, str] | None, mode: PermissionMode
    ) -> tuple[Path, dict[str, str], Spawner]:
        """The resolved working directory, the command environment and the spawner of a command."""
        assert self._binding is not None and self._private is not None
        directory = self._path(cwd, mode, write=False).directory() if cwd else self._root
        environment = command_environment(self._private / "tmp", self._binding.environment, env)
        return directory, environment, self._sandbox(mode)

    def _sandbox(self, mode: PermissionMode) -> Spawner:
        if mode is PermissionMode.UNCONFINED:
            return UNCONFINED
        sandbox = self._sandboxes.get(mode)
        if sandbox is None:
            assert self._private is not None
            writable = (
                (self._root, *self._command_roots(), self._private / "tmp")
                if mode is PermissionMode.STANDARD
                else ()
            )
            try:
                no_tcp = self._binding is not None and self._binding.command_network is CommandNetwork.NO_TCP
                policy = SandboxPolicy(mode=mode, writable=writable, no_tcp=no_tcp)
                sandbox = open_sandbox(policy, self._environ)
            except SandboxUnavailable as error:
                raise WorkerError(ErrorCode.SANDBOX_UNAVAILABLE, str(error)) from None
            self._sandboxes[mode] = sandbox
        return sandbox.spawner

    async def _exec_command(self, args: ExecCommandArguments, mode: PermissionMode) -> ToolResult:
        cwd, env, spawner = self._command_setup(args.cwd, args.env, mode)
        outcome = await run_command(
            list(args.argv),
            cwd=cwd,
            env=env,
            spawner=spawner,
            timeout_ms=args.timeout_ms,
            max_output_bytes=EXEC_OUTPUT_BYTES,
        )
        if outcome.start_error is not None and outcome.exit_code is None:
            raise WorkerError(
                ErrorCode.SANDBOX_UNAVAILABLE, f"the sandbox could not be applied: {outcome.start_error}"
            )
        if outcome.start_error is not None:
            return ToolResult(
                output=f"the command could not start: {outcome.start_error}",
                is_error=True,
                metadata=outcome.metadata().to_wire(),
            )
        text = outcome.output.decode("utf-8", "replace")
        if outcome.truncated:
            text = f"[{outcome.total_bytes - len(outcome.output)} earlier bytes omitted]\n{text}"
        return ToolResult(output=text, is_error=outcome.exit_code != 0, metadata=outcome.metadata().to_wire())

    # --- processes -----------------------------------------------------------------------------

    @property
    def processes(self) -> ProcessRegistry:
        assert self._processes is not None, "initialize comes first"
        return self._processes

    async def process_start(self, params: ProcessStartParams, context: RequestContext) -> ExecutionProcessV4:
        cwd, env, spawner = self._command_setup(params.cwd, params.env, params.permission_mode)
        return await self.processes.start(params, argv=list(params.argv), cwd=cwd, env=env, spawner=spawner)

    # Listing and looking up never wait: plain handlers, answered without a task each.
    def process_list(self, params: ProcessListParams, context: RequestContext) -> ProcessListResult:
        return ProcessListResult(processes=self.processes.list())

    def process_get(self, params: ProcessGetParams, context: RequestContext) -> ExecutionProcessV4:
        return self.processes.get(params.id)

    async def process_read(self, params: ProcessReadParams, context: RequestContext) -> ProcessReadResult:
        return await self.processes.read(params)

    async def process_stop(self, params: ProcessStopParams, context: RequestContext) -> ExecutionProcessV4:
        return await self.processes.stop(params.id, params.signal, params.grace_ms)

    async def process_write(self, params: ProcessWriteParams, context: RequestContext) -> ExecutionProcessV4:
        try:
            data = base64.b64decode(params.data, validate=True)
        except (binascii.Error, ValueError):  # ValueError: characters outside ASCII
            raise WorkerError(ErrorCode.INVALID_REQUEST, "data: not valid base64") from None
        return await self.processes.write(params.id, data, params.close)

    # --- exports -------------------------------------------------------------------------------

    @property
    def exports(self) -> Exports:
        assert self._exports is not None, "initialize comes first"
        return self._exports

    async def export_open(self, params: ExportOpenParams, context: RequestContext) -> ExportOpenResult:
        return await self.exports.open(self._path(params.path, PermissionMode.STANDARD, write=False))

    async def export_read(self, params: ExportReadParams, context: RequestContext) -> ExportReadResult:
        return self.exports.read(params)

    async def export_close(self, params: ExportCloseParams, context: RequestContext) -> EmptyResult:
        return self.exports.close(params.token)

    def _command_roots(self) -> list[Path]:
        """The file roots a `standard` command may write beneath: all but the shared temporary directory."""
        return [Path(each.path) for each in self._file_roots if each.kind is not FileRootKind.TEMPORARY]

    def _program_confinement(self) -> tuple[Path, Spawner]:
        """Where a `run_code` program runs and what starts its interpreter: the read_only sandbox."""
        assert self._private is not None, "initialize comes first"
        return self._private / "tmp", self._sandbox(PermissionMode.READ_ONLY)


def _directory(path: Path, field: str, must_exist: bool) -> Path:
    """A directory of the binding (`field` names it), created with its parents unless it `must_exist`."""
    if not path.exists():
        if must_exist:
            raise WorkerError(ErrorCode.WORKSPACE_MISSING, f"{field}: {path} does not exist")
        path.mkdir(parents=True)
    elif not path.is_dir():
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"{field}: {path} is not a directory")
    return path


def _tool_arguments(model: type[PlainModel], text: str) -> PlainModel:
    """A tool's encoded arguments, strictly validated; `invalid_request` naming the field otherwise."""
    try:
        arguments = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"call.arguments: not JSON: {error}") from None
    if not isinstance(arguments, dict):
        raise WorkerError(ErrorCode.INVALID_REQUEST, "call.arguments: not a JSON object")
    try:
        return model._decode(arguments, "call.arguments")
    except Invalid as error:
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"{error.location}: {error.message}") from None
