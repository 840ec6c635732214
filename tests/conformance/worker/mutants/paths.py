"""Mutants of the path rules and what guards them: the root boundary, symlinks out of it, unconfined mode,
the sensitive-path guard, read_only, the OS sandbox and a command's environment."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wuu.generated.catalog import WORKER_TOOLS
from wuu.generated.models import (
    EditFileArguments,
    ErrorCode,
    ExecCommandArguments,
    ExecutionToolRequestV4,
    ExportOpenParams,
    InitializeParams,
    PermissionMode,
    ProcessStartParams,
    WriteFileArguments,
)
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, Handler, RequestContext, WorkerError
from wuu.worker.native import files
from wuu.worker.native.environment import command_environment
from wuu.worker.native.paths import Resolved, resolve
from wuu.worker.native.sensitive import SensitivePaths, default_home, default_wuu_home
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import Override, override, rewrite_params, tool_arguments, with_arguments

FILE_TOOLS = frozenset(("read_file", "write_file", "edit_file", "list_dir"))
UNCONFINED = PermissionMode.UNCONFINED

# The spec's pattern for env names (ExecCommandArguments, ProcessStartParams): a variable named otherwise
# cannot be passed in a request.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _path_of(request: ExecutionToolRequestV4) -> str | None:
    """The path the worker resolves for an `execute` call: a file tool's `path`, exec_command's `cwd`.

    None when the call names none, or when the worker refuses it before it looks at any path: an unknown
    tool, arguments that break the tool's schema, a mutating tool in read_only.
    """
    arguments = tool_arguments(request)
    if arguments is None:
        return None
    if WORKER_TOOLS[request.tool].mutating and request.permission_mode is PermissionMode.READ_ONLY:
        return None
    if isinstance(arguments, ExecCommandArguments):
        return arguments.cwd
    path: str | None = getattr(arguments, "path", None)
    return path


def _within(location: str, root: str) -> bool:
    """Whether the absolute, normalized `location` is `root` or below it."""
    return location == root or location.startswith(root.rstrip("/") + "/")


def _checking_paths(
    backend: ExecutionBackendV4, check: Callable[[Path, str, PermissionMode], None]
) -> ExecutionBackendV4:
    """`backend` with `check(root, path, mode)` run before the worker on every path it would resolve: the path
    of a file tool and the cwd of exec_command and process/start, in the call's mode, and the path of
    export/open, which the worker resolves as in standard. `check` refuses a path by raising WorkerError."""

    def make_execute(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            path = _path_of(request)
            if path is not None:
                check(Path(context.binding.root), path, request.permission_mode)
            return await execute(request, context)

        return handler

    def make_start(start: Handler) -> Handler:
        async def handler(params: ProcessStartParams, context: RequestContext) -> WireModel:
            if params.cwd is not None:
                check(Path(context.binding.root), params.cwd, params.permission_mode)
            return await start(params, context)

        return handler

    def make_export(export_open: Handler) -> Handler:
        async def handler(params: ExportOpenParams, context: RequestContext) -> WireModel:
            check(Path(context.binding.root), params.path, PermissionMode.STANDARD)
            return await export_open(params, context)

        return handler

    backend = override(backend, "execute", make_execute)
    backend = override(backend, "process/start", make_start)
    return override(backend, "export/open", make_export)


def _lifting_boundary(lets_out: Callable[[str, str], bool]) -> Override:
    """An override that runs a file tool's confined call in unconfined mode when `lets_out(the root's real
    path, path)` holds, so that its path resolves without the root boundary.

    For a file tool that is all the mode changes: the sensitive-path guard holds in every mode, and
    read_only refuses a mutation before any path is looked at (those calls are left alone). A command's cwd
    keeps the boundary, since for a command the mode also decides the sandbox.
    """

    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        def make(execute: Handler) -> Handler:
            async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
                path = _path_of(request) if request.tool in FILE_TOOLS else None
                if (
                    path is not None
                    and request.permission_mode is not UNCONFINED
                    and lets_out(os.path.realpath(context.binding.root), path)
                ):
                    request = request.model_copy(update={"permission_mode": UNCONFINED})
                return await execute(request, context)

            return handler

        return override(backend, "execute", make)

    return broken


# --- the root boundary ------------------------------------------------------------------------------------


@mutant(
    "allows-dotdot",
    "lets a relative path with `..` leave the root in standard and read_only",
    "paths.outside-root",
)
def allows_dotdot(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """A file tool's relative path with a `..` component is resolved without the root boundary (the call runs
    unconfined); a command's cwd keeps the boundary."""
    return _lifting_boundary(lambda root, path: not os.path.isabs(path) and ".." in path.split("/"))(
        worker, backend
    )


@mutant(
    "follows-symlinks-out",
    "follows a symlink inside the root to a target outside it",
    "paths.symlink-escape",
)
def follows_symlinks_out(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """A file tool's path that is inside the root as written is resolved without the boundary (the call runs
    unconfined), so its symlinks may leave; a command's cwd keeps the boundary."""
    return _lifting_boundary(lambda root, path: _within(os.path.normpath(os.path.join(root, path)), root))(
        worker, backend
    )


@mutant(
    "confines-unconfined",
    "keeps the root boundary in unconfined mode",
    "paths.unconfined",
)
def confines_unconfined(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Paths are resolved confined to the root in every mode: in unconfined, each path a call resolves is
    resolved confined first, and one that leaves the root gets path_outside_root."""

    def confined(root: Path, path: str, mode: PermissionMode) -> None:
        if mode is UNCONFINED:
            resolve(root, path, confined=True)

    return _checking_paths(backend, confined)


@mutant(
    "writes-multi-link-files",
    "writes and edits a file with more than one hard link in standard",
    "paths.multi-link-write",
)
def writes_multi_link_files(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """write_file and edit_file in standard resolve their path with the root boundary and pass the worker's
    sensitive-path guard, then write it opened as in unconfined, where a file's hard links are not counted."""
    guard = SensitivePaths.load(home=default_home(os.environ), wuu_home=default_wuu_home(os.environ))

    def make(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            arguments = tool_arguments(request)
            if request.permission_mode is not PermissionMode.STANDARD or not isinstance(
                arguments, WriteFileArguments | EditFileArguments
            ):
                return await execute(request, context)
            root = Path(context.binding.root)
            resolved = resolve(root, arguments.path, confined=True)
            guard.check(Path(os.path.normpath(root / arguments.path)), write=True, acts_on=resolved)
            path = Resolved(resolved, None, arguments.path)
            if isinstance(arguments, WriteFileArguments):
                return files.write_file(path, arguments)
            return files.edit_file(path, arguments)

        return handler

    return override(backend, "execute", make)


# --- sensitive paths ----------------------------------------------------------------------------------------


@mutant(
    "sensitive-writable-unconfined",
    "lets unconfined tools write sensitive paths such as .env",
    "sensitive.write-refused",
)
def sensitive_writable_unconfined(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """In unconfined mode the sensitive-path guard is skipped for writes: write_file and edit_file resolve
    their path (without the boundary) and run the worker's own file tools here, with no guard on the way."""

    def make(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            arguments = tool_arguments(request)
            if request.permission_mode is UNCONFINED and isinstance(
                arguments, WriteFileArguments | EditFileArguments
            ):
                resolved = resolve(Path(context.binding.root), arguments.path, confined=False)
                path = Resolved(resolved, None, arguments.path)
                if isinstance(arguments, WriteFileArguments):
                    return files.write_file(path, arguments)
                return files.edit_file(path, arguments)
            return await execute(request, context)

        return handler

    return override(backend, "execute", make)


@mutant(
    "sensitive-misses-dangling-links",
    "checks a write's target against the guard only when it exists, missing `notes -> .env` with no .env yet",
    "sensitive.through-links",
)
def sensitive_misses_dangling_links(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """write_file and edit_file (outside read_only, which refuses them first) check the guard against the path as
    named and, only when it exists, its real path; the path they then write is resolved as the worker resolves
    it. So a symlink to a sensitive file that does not exist yet, or `link/../name` that lands in .aws, is
    written through."""
    guard = SensitivePaths.load(home=default_home(os.environ), wuu_home=default_wuu_home(os.environ))

    def make(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            arguments = tool_arguments(request)
            mode = request.permission_mode
            if mode is PermissionMode.READ_ONLY or not isinstance(
                arguments, WriteFileArguments | EditFileArguments
            ):
                return await execute(request, context)
            root = Path(context.binding.root)
            confined = mode is not UNCONFINED
            path = Resolved(
                resolve(root, arguments.path, confined=confined),
                os.path.realpath(root) if confined else None,
                arguments.path,
            )
            named = Path(os.path.normpath(root / arguments.path))
            real = Path(os.path.realpath(named, strict=True)) if named.exists() else named
            guard.check(named, write=True, acts_on=real)
            if isinstance(arguments, WriteFileArguments):
                return files.write_file(path, arguments)
            return files.edit_file(path, arguments)

        return handler

    return override(backend, "execute", make)


@mutant(
    "guards-credentials-go",
    "treats any file named credentials.* (credentials.go included) as sensitive",
    "sensitive.not-overbroad",
)
def guards_credentials_go(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The sensitive-path guard refuses every path whose name starts with `credentials`: each path a call
    resolves is checked here, after the root boundary as the worker checks it, before the worker's own guard."""

    def overbroad(root: Path, path: str, mode: PermissionMode) -> None:
        resolve(root, path, confined=mode is not UNCONFINED)
        if Path(os.path.normpath(path)).name.lower().startswith("credentials"):
            raise WorkerError(ErrorCode.SENSITIVE_PATH, f"{path} looks like a credential file")

    return _checking_paths(backend, overbroad)


# --- read_only and the sandbox ------------------------------------------------------------------------------


def _writes_as_standard(request: ExecutionToolRequestV4) -> dict[str, Any]:
    """The fields that run a read_only write_file as standard."""
    if request.tool == "write_file" and request.permission_mode is PermissionMode.READ_ONLY:
        return {"permission_mode": PermissionMode.STANDARD}
    return {}


@mutant(
    "read-only-writes",
    "lets write_file write in read_only",
    "readonly.mutation-refused",
)
def read_only_writes(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """A read_only `write_file` runs as if the mode were standard."""
    return rewrite_params("execute", _writes_as_standard)(worker, backend)


@mutant(
    "confined-runs-unconfined",
    "runs standard and read_only commands without the OS sandbox",
    "sandbox.never-unconfined",
)
def confined_runs_unconfined(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Commands get no sandbox in any mode: exec_command and process/start run in unconfined mode once their
    cwd has passed the root boundary of the mode asked (for a command, the mode decides only those two)."""

    def unsandboxed(root: Path, cwd: str | None, mode: PermissionMode) -> dict[str, Any]:
        """The fields that run a command of `mode` unconfined; none for an unconfined one."""
        if mode is UNCONFINED:
            return {}
        if cwd is not None:
            resolve(root, cwd, confined=True)
        return {"permission_mode": UNCONFINED}

    def make_execute(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            arguments = tool_arguments(request)
            if isinstance(arguments, ExecCommandArguments):
                root = Path(context.binding.root)
                request = request.model_copy(update=unsandboxed(root, arguments.cwd, request.permission_mode))
            return await execute(request, context)

        return handler

    def make_start(start: Handler) -> Handler:
        async def handler(params: ProcessStartParams, context: RequestContext) -> WireModel:
            root = Path(context.binding.root)
            return await start(
                params.model_copy(update=unsandboxed(root, params.cwd, params.permission_mode)), context
            )

        return handler

    return override(override(backend, "execute", make_execute), "process/start", make_start)


# --- a command's environment ------------------------------------------------------------------------------


def _leaked(binding: InitializeParams, requested: dict[str, str] | None) -> dict[str, str]:
    """A command's requested `env` over the worker's own environment, which is left out only where the worker
    sets a variable itself (PATH, TMPDIR and the forwarded ones win over os.environ, as over any base)."""
    own = set(command_environment(Path(), binding.environment, None))
    leaked = {
        name: value for name, value in os.environ.items() if ENV_NAME.fullmatch(name) and name not in own
    }
    return {**leaked, **(requested or {})}


@mutant(
    "leaks-worker-environment",
    "passes the worker's own environment on to commands",
    "commands.environment",
)
def leaks_worker_environment(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """A command's environment starts from the worker's os.environ: exec_command and process/start get it
    added under their requested `env`."""

    def make_execute(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            arguments = tool_arguments(request)
            if isinstance(arguments, ExecCommandArguments):
                env = _leaked(context.binding, arguments.env)
                request = with_arguments(request, {**arguments.to_wire(), "env": env})
            return await execute(request, context)

        return handler

    def make_start(start: Handler) -> Handler:
        async def handler(params: ProcessStartParams, context: RequestContext) -> WireModel:
            return await start(
                params.model_copy(update={"env": _leaked(context.binding, params.env)}), context
            )

        return handler

    return override(override(backend, "execute", make_execute), "process/start", make_start)
