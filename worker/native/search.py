"""The search tools of `execute`: search_content through ripgrep, search_files by glob (spec: search.schema.json).

search_content runs the real `rg` (never a shell, never another search in its place) with its `--json`
output, and reads that stream itself: each match's file is checked against the sensitive-path guard before
one of its lines is shown (and, under the boundary, against the root), and each line is redacted
(redaction.py). Neither tool follows a symlink below the path it was given: ripgrep does not by default, and
the file walk descends from directory descriptors.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_SEARCH_LINE_MAX_CHARS
from wuu.generated.plain import (
    ErrorCode,
    SearchContentArguments,
    SearchContentMetadata,
    SearchFilesArguments,
    SearchFilesMetadata,
    ToolResult,
)

from ..errors import WorkerError
from .environment import required_command
from .files import os_errors
from .paths import Resolved
from .redaction import Redactor
from .sensitive import SensitivePaths

# What rg may write to stderr that the worker keeps for an error message.
_STDERR_BYTES = 8192
# The longest line of rg's JSON output the worker reads: a match carries its whole line (rg's --max-columns
# does not apply to --json), and a line is redacted whole before it is cut.
_RG_MESSAGE_BYTES = 256 * 1024 * 1024
_LISTABLE = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Matches:
    """The lines found so far, at most `limit` of them."""

    limit: int
    lines: list[str] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    truncated: bool = False


def _shown(path: str, real_root: str) -> str:
    """A path as the search tools show it: relative to the root, absolute outside it (unconfined, or in a file root)."""
    if path == real_root:
        return "."
    prefix = real_root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path


def _within(path: str, real_root: str) -> bool:
    return path == real_root or path.startswith(real_root.rstrip("/") + "/")


def _text(value: dict[str, Any]) -> str:
    """A ripgrep JSON string value: `{"text": ...}`, or `{"bytes": base64}` for bytes that are not UTF-8."""
    if "text" in value:
        return str(value["text"])
    return base64.b64decode(value["bytes"]).decode("utf-8", "replace")


def _cut(line: str) -> str:
    if len(line) <= WORKER_SEARCH_LINE_MAX_CHARS:
        return line
    return line[:WORKER_SEARCH_LINE_MAX_CHARS] + "…"


class _Guard:
    """Which files a search may show a line of, decided once per file: none that is a sensitive path, and
    under the boundary (`root`) none whose real path is outside the root. rg opens the directories it walks
    by name, so a directory swapped for a symlink out of the root while it walks could lead it out: what it
    read there is dropped, not shown."""

    def __init__(self, sensitive: SensitivePaths, root: str | None) -> None:
        self._sensitive = sensitive
        self._root = root
        self._decided: dict[str, bool] = {}

    def allows(self, path: str) -> bool:
        allowed = self._decided.get(path)
        if allowed is None:
            allowed = self._decide(path)
            self._decided[path] = allowed
        return allowed

    def _decide(self, path: str) -> bool:
        if self._root is not None and not _within(os.path.realpath(path), self._root):
            return False
        if self._sensitive.match(Path(path)).sensitive:
            return False
        try:
            # By identity too: a hard link to Wuu's auth.json is that file under another name.
            self._sensitive.check_opened(os.stat(path, follow_symlinks=False), Path(path), write=False)
        except WorkerError:
            return False
        except OSError:  # gone since rg read it: nothing of it is shown
            return False
        return True


def _kind(target: Resolved) -> int:
    """The st_mode of the search's path, opened under the boundary (`not_found` when it is missing)."""
    with os_errors(target.path):
        handle = target.open(os.O_PATH)
        try:
            return os.fstat(handle).st_mode
        finally:
            os.close(handle)


def _rg_command(rg: str, args: SearchContentArguments, path: Path) -> list[str]:
    command = [rg, "--json", "--no-config", "--no-ignore", "--sort", "path"]
    command.append("--case-sensitive" if args.case_sensitive else "--ignore-case")
    if args.literal:
        command.append("--fixed-strings")
    if args.include_hidden:
        command.append("--hidden")
    for glob in args.globs or ():
        command += ["--glob", glob]
    # Last, so that no glob of the request overrides it: Git's internals are never searched.
    command += ["--glob", "!.git", "--regexp", args.pattern, "--", os.fspath(path)]
    return command


async def search_content(
    target: Resolved,
    args: SearchContentArguments,
    *,
    root: Path,
    sensitive: SensitivePaths,
    redactor: Redactor,
) -> ToolResult:
    """Run ripgrep over the target and show at most `max_results` matching lines, guarded and redacted."""
    rg = required_command("rg", "search_content needs ripgrep")
    kind = _kind(target)
    if not (stat.S_ISDIR(kind) or stat.S_ISREG(kind)):
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"{target.requested} is neither a directory nor a file")
    real_root = os.path.realpath(root)
    found = _Matches(limit=args.max_results)
    guard = _Guard(sensitive, target.root)
    process = await asyncio.create_subprocess_exec(
        *_rg_command(rg, args, target.path),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=real_root,
        env={},
        limit=_RG_MESSAGE_BYTES,
    )
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(process.stderr.read(_STDERR_BYTES))
    summary = False
    read_all = False
    try:
        async for line in process.stdout:
            message = orjson.loads(line)
            if message.get("type") == "summary":
                summary = True
            if message.get("type") != "match" or not _take(
                message["data"], found, guard, real_root, redactor
            ):
                continue
            if found.truncated:
                break
        read_all = not found.truncated
    finally:
        # Stopped early (enough lines, or cancelled): rg's remaining work is not wanted. After its whole
        # output it is left to exit, with the status that tells a refused pattern.
        if not read_all and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        status = await process.wait()
        stderr = await errors
    if status == 2 and not summary and not found.truncated:
        # rg stops before it searches anything when the pattern is not one it reads.
        message = " ".join(stderr.decode("utf-8", "replace").split())
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"pattern: {message}")
    output = "\n".join(found.lines)
    if found.truncated:
        output += f"\n[more matches were left out: max_results ({args.max_results}) reached]"
    metadata = SearchContentMetadata(
        matches=len(found.lines), files=len(found.files), truncated=found.truncated
    )
    return ToolResult(output=output, is_error=False, metadata=metadata.to_wire())


def _take(data: dict[str, Any], found: _Matches, guard: _Guard, real_root: str, redactor: Redactor) -> bool:
    """Add one rg match to `found` unless its file is guarded; whether it counted (or truncated)."""
    path = _text(data["path"])
    if not guard.allows(path):
        return False
    if len(found.lines) == found.limit:
        found.truncated = True
        return True
    text = _text(data["lines"]).removesuffix("\n").removesuffix("\r")
    shown = _shown(path, real_root)
    found.lines.append(f"{shown}:{data['line_number']}:{_cut(redactor.redact(text))}")
    found.files.add(shown)
    return True


# --- search_files ----------------------------------------------------------------------------------


def glob_pattern(glob: str) -> re.Pattern[str]:
    """A SearchGlob as a regular expression over a relative path: with a `/`, over the whole path;
    without one, over its last component."""
    body = _translate(glob)
    return re.compile(body if "/" in glob else f"(?:.*/)?{body}", re.DOTALL)


def _translate(glob: str) -> str:
    pieces: list[str] = []
    index = 0
    while index < len(glob):
        if glob.startswith("**/", index) and (index == 0 or glob[index - 1] == "/"):
            pieces.append("(?:[^/]*/)*")
            index += 3
        elif (
            glob.startswith("**", index) and (index == 0 or glob[index - 1] == "/") and index + 2 == len(glob)
        ):
            pieces.append(".*")
            index += 2
        elif glob[index] == "*":
            pieces.append("[^/]*")
            index += 1
        elif glob[index] == "?":
            pieces.append("[^/]")
            index += 1
        elif glob[index] == "{" and "}" in glob[index:]:
            end = glob.index("}", index)
            pieces.append(
                "(?:" + "|".join(_translate(part) for part in glob[index + 1 : end].split(",")) + ")"
            )
            index = end + 1
        else:
            pieces.append(re.escape(glob[index]))
            index += 1
    return "".join(pieces)


def _walk(directory: int, prefix: str, include_hidden: bool) -> Iterator[tuple[str, bool]]:
    """Every entry below the open `directory`: its path relative to it and whether it is a directory.
    Symlinks are entries, never followed; `.git` is never entered or listed."""
    with os.scandir(directory) as scan:
        items = list(scan)
    for item in items:
        if item.name == ".git" or (item.name.startswith(".") and not include_hidden):
            continue
        is_directory = item.is_dir(follow_symlinks=False)
        yield prefix + item.name, is_directory
        if is_directory:
            try:
                below = os.open(item.name, _LISTABLE, dir_fd=directory)
            except OSError:  # gone, unreadable, or swapped for a symlink since it was listed: not followed
                continue
            try:
                yield from _walk(below, f"{prefix}{item.name}/", include_hidden)
            finally:
                os.close(below)


def _matching_paths(target: Resolved, args: SearchFilesArguments, real_root: str) -> list[str]:
    pattern = glob_pattern(args.pattern)
    path = target.path
    with os_errors(path):
        handle = target.open(os.O_PATH)
        try:
            if not stat.S_ISDIR(os.fstat(handle).st_mode):
                raise WorkerError(ErrorCode.INVALID_REQUEST, f"{target.requested} is not a directory")
            directory = os.open(".", _LISTABLE, dir_fd=handle)
        finally:
            os.close(handle)
        try:
            base = _shown(os.fspath(path), real_root)
            prefix = "" if base == "." else base.rstrip("/") + "/"
            return sorted(
                prefix + relative + ("/" if is_directory else "")
                for relative, is_directory in _walk(directory, "", args.include_hidden)
                if pattern.fullmatch(relative)
            )
        finally:
            os.close(directory)


async def search_files(target: Resolved, args: SearchFilesArguments, *, root: Path) -> ToolResult:
    """The sorted paths under the target that match the glob, at most `max_results` of them."""
    found = await asyncio.to_thread(_matching_paths, target, args, os.path.realpath(root))
    shown = found[: args.max_results]
    truncated = len(found) > args.max_results
    output = "\n".join(shown)
    if truncated:
        output += f"\n[{len(found) - len(shown)} more paths were left out: max_results ({args.max_results}) reached]"
    metadata = SearchFilesMetadata(paths=shown, truncated=truncated)
    return ToolResult(output=output, is_error=False, metadata=metadata.to_wire())
