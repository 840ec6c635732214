"""Mutants of the search tools: a search_content that skips one of its rules (the sensitive-path guard, the
symlink rule, redaction).

Each answers search_content, once the worker has accepted the call (so its refusals stay), with a plain ripgrep
run of its own in the root, as a careless implementation would: every other rule of the tool kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

from wuu.generated.catalog import WORKER_SEARCH_LINE_MAX_CHARS
from wuu.generated.models import (
    ExecutionToolRequestV4,
    InitializeParams,
    SearchContentArguments,
    SearchContentMetadata,
    ToolResult,
)
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, Handler, RequestContext
from wuu.worker.native.redaction import default_redactor
from wuu.worker.native.sensitive import SensitivePaths, default_home, default_wuu_home
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import override, tool_arguments


@dataclasses.dataclass(frozen=True)
class _Careless:
    """What the careless search leaves out."""

    guard: bool
    """Whether it drops the lines of sensitive paths."""
    follow: bool
    """Whether it follows symlinks (rg -L)."""
    redact: bool
    """Whether it redacts the lines."""


async def _careless_search(root: str, args: SearchContentArguments, careless: _Careless) -> ToolResult:
    argv = ["rg", "--no-heading", "--line-number", "--with-filename", "--no-ignore", "--sort", "path"]
    argv += ["--color", "never", "--case-sensitive" if args.case_sensitive else "--ignore-case"]
    argv += ["--fixed-strings"] if args.literal else []
    argv += ["--hidden"] if args.include_hidden else []
    argv += ["--follow"] if careless.follow else []
    for glob in [*(args.globs or ()), "!.git"]:
        argv += ["--glob", glob]
    argv += ["--regexp", args.pattern, "--", args.path]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    stdout, _ = await process.communicate()
    sensitive = SensitivePaths.load(home=default_home(os.environ), wuu_home=default_wuu_home(os.environ))
    shown: list[str] = []
    for line in stdout.decode("utf-8", "replace").splitlines():
        path, number, text = line.split(":", 2)
        path = os.path.relpath(os.path.join(root, path), root)
        if careless.guard and sensitive.match(Path(root) / path).sensitive:
            continue
        if careless.redact:
            text = default_redactor().redact(text)
        if len(text) > WORKER_SEARCH_LINE_MAX_CHARS:
            text = text[:WORKER_SEARCH_LINE_MAX_CHARS] + "…"
        shown.append(f"{path}:{number}:{text}")
    kept = shown[: args.max_results]
    truncated = len(shown) > len(kept)
    output = "\n".join(kept) + ("\n[more matches were left out]" if truncated else "")
    files = {line.split(":", 1)[0] for line in kept}
    metadata = SearchContentMetadata(matches=len(kept), files=len(files), truncated=truncated)
    return ToolResult(output=output, is_error=False, metadata=metadata.to_wire())


def _careless(careless: _Careless) -> Any:
    def broken(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
        bound: dict[str, str] = {}
        initialize = backend.initialize

        async def remember(params: InitializeParams, context: RequestContext) -> Any:
            outcome = await initialize(params, context)
            bound.setdefault("root", os.path.realpath(params.root))
            return outcome

        def make(original: Handler) -> Handler:
            async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
                result = await original(request, context)
                arguments = tool_arguments(request) if request.tool == "search_content" else None
                if not isinstance(arguments, SearchContentArguments):
                    return result
                return await _careless_search(bound["root"], arguments, careless)

            return handler

        return override(dataclasses.replace(backend, initialize=remember), "execute", make)

    return broken


@mutant(
    "search-shows-sensitive",
    "search_content shows the lines of sensitive files (.env, private keys, credential stores)",
    "search.sensitive",
)
def search_shows_sensitive(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """search_content answers with a ripgrep run that keeps every file's lines, sensitive ones included."""
    broken: ExecutionBackendV4 = _careless(_Careless(guard=False, follow=False, redact=True))(worker, backend)
    return broken


@mutant(
    "search-follows-symlinks",
    "search_content follows symlinks below its path, out of the root",
    "search.boundary",
)
def search_follows_symlinks(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """search_content answers with a ripgrep run that follows symlinks (rg --follow)."""
    broken: ExecutionBackendV4 = _careless(_Careless(guard=True, follow=True, redact=True))(worker, backend)
    return broken


@mutant(
    "search-unredacted",
    "search_content shows the lines it finds without redacting secrets",
    "search.redaction",
)
def search_unredacted(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """search_content answers with a ripgrep run whose lines are shown as found, secrets and all."""
    broken: ExecutionBackendV4 = _careless(_Careless(guard=True, follow=False, redact=False))(worker, backend)
    return broken
