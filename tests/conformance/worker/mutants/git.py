"""Mutants of the Git tools: a git_add without the sensitive staging guard, a git_diff that shows a sensitive
file's content, a git_commit that runs the repository's hooks.

Each answers its tool with a plain `git` run of its own in the repository directory, as a careless
implementation would; every other tool stays the reference worker's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from wuu.generated.models import (
    ErrorCode,
    ExecutionToolRequestV4,
    GitAddArguments,
    GitCommitArguments,
    GitDiffArguments,
    GitMetadata,
    InitializeParams,
    PermissionMode,
    ToolResult,
)
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, Handler, RequestContext, WorkerError
from wuu.worker.native.sensitive import SensitivePaths, default_home, default_wuu_home
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import override, tool_arguments

Careless = Callable[[Path, Any], Awaitable[ToolResult]]
"""A careless tool: its result for the repository directory and its decoded arguments."""


async def _plain_git(directory: Path, arguments: list[str]) -> ToolResult:
    process = await asyncio.create_subprocess_exec(
        "git",
        *arguments,
        cwd=directory,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout, _ = await process.communicate()
    status = process.returncode or 0
    metadata = GitMetadata(exit_code=status, truncated=False, withheld=[])
    return ToolResult(
        output=stdout.decode("utf-8", "replace"), is_error=status != 0, metadata=metadata.to_wire()
    )


def _careless(tool: str, careless: Careless) -> Any:
    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        bound: dict[str, str] = {}
        initialize = backend.initialize

        async def remember(params: InitializeParams, context: RequestContext) -> Any:
            outcome = await initialize(params, context)
            bound.setdefault("root", params.root)
            return outcome

        def make(original: Handler) -> Handler:
            async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
                # read_only keeps its refusals: the mutant breaks the one rule of its tool, nothing else.
                if request.tool != tool or request.permission_mode is PermissionMode.READ_ONLY:
                    return await original(request, context)
                arguments = tool_arguments(request)
                return await careless(Path(bound["root"]) / arguments.path, arguments)

            return handler

        return override(dataclasses.replace(backend, initialize=remember), "execute", make)

    return broken


async def _add(directory: Path, arguments: GitAddArguments) -> ToolResult:
    return await _plain_git(directory, ["add", "--", *arguments.paths])


async def _diff(directory: Path, arguments: GitDiffArguments) -> ToolResult:
    staged = ["--cached"] if arguments.staged else []
    return await _plain_git(directory, ["diff", "--no-color", *staged, "--", *(arguments.paths or ())])


@mutant(
    "git-add-stages-sensitive",
    "git_add stages what its pathspecs match, .env through `git add .` included",
    "git.sensitive-staging",
)
def git_add_stages_sensitive(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """git_add answers with a plain `git add -- <paths>`, no sensitive staging guard."""
    broken: ExecutionBackendV4 = _careless("git_add", _add)(worker, backend)
    return broken


@mutant(
    "git-diff-shows-sensitive",
    "git_diff shows the patch of every file, a sensitive file's content included",
    "git.withheld",
)
def git_diff_shows_sensitive(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """git_diff answers with a plain `git diff`, nothing withheld."""
    broken: ExecutionBackendV4 = _careless("git_diff", _diff)(worker, backend)
    return broken


async def _commit(directory: Path, arguments: GitCommitArguments) -> ToolResult:
    """A plain `git commit -m` that keeps the staged sensitive-path guard (so that only the hooks rule breaks)."""
    staged = await _plain_git(directory, ["diff", "--cached", "--name-only", "--diff-filter=d"])
    top = await _plain_git(directory, ["rev-parse", "--show-toplevel"])
    sensitive = SensitivePaths.load(home=default_home(os.environ), wuu_home=default_wuu_home(os.environ))
    for name in staged.output.splitlines():
        if sensitive.match(Path(top.output.strip()) / name).sensitive:
            raise WorkerError(ErrorCode.SENSITIVE_PATH, f"the index holds {name!r}: sensitive path")
    return await _plain_git(directory, ["commit", "-m", arguments.message])


@mutant(
    "git-commit-runs-hooks",
    "git_commit runs the repository's hooks",
    "git.no-hooks",
)
def git_commit_runs_hooks(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """git_commit answers with a plain `git commit -m`, which runs the repository's hooks."""
    broken: ExecutionBackendV4 = _careless("git_commit", _commit)(worker, backend)
    return broken
