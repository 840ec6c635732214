"""The Git tools of `execute`: status, diff, log, show, add, commit, branch, checkout (spec: git.schema.json).

Each runs the real `git` (an argument list, never a shell) with nothing of the repository able to run code:
hooks point at /dev/null, and every configured program (pager, fsmonitor, external diff, textconv, filter
drivers, signing) is switched off on the command line, which outranks every configuration file. What a
tool would stage, commit, check out or show is listed first and checked against the sensitive-path guard;
what it shows is redacted (redaction.py) and bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from wuu.generated.catalog import WORKER_GIT_OUTPUT_MAX_BYTES
from wuu.generated.plain import (
    ErrorCode,
    GitAddArguments,
    GitBranchArguments,
    GitCheckoutArguments,
    GitCommitArguments,
    GitDiffArguments,
    GitLogArguments,
    GitMetadata,
    GitShowArguments,
    GitStatusArguments,
    ToolResult,
)

from ..errors import WorkerError
from .environment import MINIMAL_PATH, required_command
from .files import os_errors
from .paths import Resolved
from .redaction import Redactor
from .sensitive import SensitivePaths

GitArguments = (
    GitStatusArguments
    | GitDiffArguments
    | GitLogArguments
    | GitShowArguments
    | GitAddArguments
    | GitCommitArguments
    | GitBranchArguments
    | GitCheckoutArguments
)

# What git may write to stderr that a result keeps.
_STDERR_BYTES = 8192
# Settings given with -c, which outrank the system, user and repository configuration: the spec's "nothing
# of the repository runs" (hooks, fsmonitor, pager, signing), no guessed identity, plain output.
_HARDENING = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.quotePath=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "user.useConfigOnly=true",
    "color.ui=false",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
)
# The options of every command that shows a patch: no external diff or textconv program; renames not
# detected, so that each file is guarded under its own path.
_PATCH = ("--no-ext-diff", "--no-textconv", "--no-renames", "--no-color", "--ignore-submodules=all")
_FILTER_VARIABLES = ("clean", "smudge", "process")


@dataclass
class _Run:
    """How one git command ended."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False


@dataclass
class _Output:
    """What a tool shows: its text so far, and what its metadata says."""

    text: str = ""
    exit_code: int = 0
    truncated: bool = False
    withheld: list[str] = field(default_factory=list)


class GitRepository:
    """One repository, found from a tool's `path`, and the hardened git that acts on it."""

    def __init__(self, git: str, directory: Path, environment: dict[str, str]) -> None:
        self._git = git
        self.directory = directory
        self._environment = environment
        self._settings: tuple[str, ...] = _HARDENING
        self.top = directory

    @classmethod
    async def find(cls, target: Resolved, *, home: Path) -> GitRepository | _Output:
        """The repository whose working tree holds the target directory, or what git said when there is none.

        Under the boundary Git does not look above the root (GIT_CEILING_DIRECTORIES), and a repository
        whose top level or Git directory is outside the root (a `.git` file or `core.worktree` pointing
        out) gets `path_outside_root`.
        """
        git = required_command("git", "the Git tools need Git")
        directory = target.directory()
        with os_errors(directory):
            if not stat.S_ISDIR(os.stat(directory).st_mode):
                raise WorkerError(ErrorCode.INVALID_REQUEST, f"{target.requested} is not a directory")
        environment = {
            "PATH": MINIMAL_PATH,
            "HOME": os.fspath(home),
            "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
        }
        if target.root is not None:
            environment["GIT_CEILING_DIRECTORIES"] = os.path.dirname(target.root)
        repository = cls(git, directory, environment)
        found = await repository.run("rev-parse", "--show-toplevel", "--absolute-git-dir")
        if found.exit_code != 0:
            return _failed(found)
        top, git_dir = found.stdout.decode("utf-8", "surrogateescape").splitlines()[:2]
        if target.root is not None:
            for place in (top, git_dir):
                real = os.path.realpath(place)
                if real != target.root and not real.startswith(target.root.rstrip("/") + "/"):
                    raise WorkerError(
                        ErrorCode.PATH_OUTSIDE_ROOT,
                        f"{target.requested}: the repository ({place}) is outside the root",
                    )
        repository.top = Path(top)
        await repository._disable_filters()
        return repository

    async def _disable_filters(self) -> None:
        """Empty every configured filter driver's programs: Git then passes content through unfiltered."""
        found = await self.run("config", "-z", "--get-regexp", r"^filter\.")
        drivers = set()
        for entry in found.stdout.split(b"\0"):
            key = entry.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
            name, _, variable = key.removeprefix("filter.").rpartition(".")
            if name and variable.lower() in _FILTER_VARIABLES:
                drivers.add(name)
        self._settings += tuple(
            f"filter.{name}.{variable}=" for name in sorted(drivers) for variable in _FILTER_VARIABLES
        )

    async def run(self, *arguments: str, limit: int = WORKER_GIT_OUTPUT_MAX_BYTES) -> _Run:
        """Run git with the hardening settings in the repository directory; at most `limit` bytes of stdout
        are kept, and git is killed when it writes more."""
        command = [self._git, "--no-pager"]
        for setting in self._settings:
            command += ["-c", setting]
        process = await asyncio.create_subprocess_exec(
            *command,
            *arguments,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.directory,
            env=self._environment,
        )
        assert process.stdout is not None and process.stderr is not None
        errors = asyncio.ensure_future(_head(process.stderr, _STDERR_BYTES))
        finished = False
        stdout = bytearray()
        try:
            while len(stdout) <= limit:
                chunk = await process.stdout.read(1 << 16)
                if not chunk:
                    break
                stdout += chunk
            finished = len(stdout) <= limit
        finally:
            # Cut short (more than `limit`, or cancelled): the rest of git's work is not wanted.
            if not finished and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            status = await process.wait()
            stderr = await errors
        return _Run(status if status >= 0 else 128 - status, bytes(stdout[:limit]), stderr, not finished)

    async def names(self, command: str, *arguments: str) -> list[str]:
        """The paths that a git `command` prints with `-z` (NUL-separated), relative to the top level."""
        found = await self.run(command, "-z", *arguments, limit=1 << 30)
        return [name for name in found.stdout.decode("utf-8", "surrogateescape").split("\0") if name]

    def result(self, output: _Output, redactor: Redactor | None = None) -> ToolResult:
        """The tool's result: the output redacted, then cut to the limit with a line saying so."""
        text = redactor.redact(output.text) if redactor is not None else output.text
        data = text.encode("utf-8", "replace")
        truncated = output.truncated or len(data) > WORKER_GIT_OUTPUT_MAX_BYTES
        if truncated:
            text = data[:WORKER_GIT_OUTPUT_MAX_BYTES].decode("utf-8", "ignore")
            text += f"\n[output cut at {WORKER_GIT_OUTPUT_MAX_BYTES} bytes]"
        metadata = GitMetadata(exit_code=output.exit_code, truncated=truncated, withheld=output.withheld)
        return ToolResult(output=text, is_error=output.exit_code != 0, metadata=metadata.to_wire())


async def _head(stream: asyncio.StreamReader, size: int) -> bytes:
    """The first `size` bytes of a stream, read to its end: a writer is never left blocked on a full pipe."""
    kept = bytearray()
    while chunk := await stream.read(1 << 16):
        kept += chunk[: max(0, size - len(kept))]
    return bytes(kept)


def _failed(run: _Run) -> _Output:
    """Git's output of a command, its stdout then its stderr."""
    text = run.stdout.decode("utf-8", "replace")
    if run.stderr:
        text += ("\n" if text and not text.endswith("\n") else "") + run.stderr.decode("utf-8", "replace")
    return _Output(text=text, exit_code=run.exit_code, truncated=run.truncated)


class GitTools:
    """The Git tools of one call: the sensitive-path guard and the redaction they apply."""

    def __init__(self, sensitive: SensitivePaths, redactor: Redactor) -> None:
        self._sensitive = sensitive
        self._redactor = redactor

    def sensitive(self, repository: GitRepository, names: list[str]) -> list[str]:
        """The names (relative to the top level) that are sensitive paths: by name, and, for a file that
        exists, by identity (a hard link to a Wuu credential file)."""
        found = []
        for name in names:
            path = repository.top / name
            if self._sensitive.match(path).sensitive:
                found.append(name)
                continue
            try:
                self._sensitive.check_opened(os.stat(path, follow_symlinks=False), path, write=True)
            except WorkerError:
                found.append(name)
            except OSError:  # not in the working tree: nothing of it to reach by identity
                continue
        return found

    def _refuse(self, names: list[str], what: str) -> None:
        if names:
            raise WorkerError(
                ErrorCode.SENSITIVE_PATH, f"{what} {', '.join(repr(name) for name in names)}: sensitive path"
            )

    async def call(self, target: Resolved, arguments: GitArguments, *, home: Path) -> ToolResult:
        """Run one Git tool on the repository whose working tree holds `target` (`home`: the user's, where
        Git finds the user's configuration and identity)."""
        repository = await GitRepository.find(target, home=home)
        if isinstance(repository, _Output):
            metadata = GitMetadata(exit_code=repository.exit_code, truncated=False, withheld=[])
            return ToolResult(output=repository.text, is_error=True, metadata=metadata.to_wire())
        if isinstance(arguments, GitStatusArguments):
            output = _failed(
                await repository.run(
                    "status", "--porcelain=v1", "--branch", "--untracked-files=all", "--ignore-submodules=all"
                )
            )
        elif isinstance(arguments, GitDiffArguments):
            output = await self._diff(repository, arguments)
        elif isinstance(arguments, GitLogArguments):
            log = ["log", "--no-decorate", "--no-color", "--format=medium", "--date=iso-strict"]
            log += [
                f"--max-count={arguments.max_count}",
                arguments.revision or "HEAD",
                "--",
                *(arguments.paths or ()),
            ]
            output = _failed(await repository.run(*log))
        elif isinstance(arguments, GitShowArguments):
            output = await self._show(repository, arguments)
        elif isinstance(arguments, GitAddArguments):
            output = await self._add(repository, arguments)
        elif isinstance(arguments, GitCommitArguments):
            output = await self._commit(repository, arguments)
        elif isinstance(arguments, GitBranchArguments):
            if arguments.create is None:
                output = _failed(await repository.run("branch", "--list", "--no-color"))
            else:
                start = arguments.start_point or "HEAD"
                output = _failed(await repository.run("branch", "--no-track", arguments.create, start))
        else:
            output = await self._checkout(repository, arguments)
        return repository.result(output, self._redactor)

    async def _withheld_patch(self, repository: GitRepository, names: list[str], *command: str) -> _Output:
        """The patch of `command`, except the part of each sensitive path among `names`, which a line
        replaces (the pathspec that ends `command` gets an exclusion for each)."""
        withheld = self.sensitive(repository, names)
        excluded = [f":(top,literal,exclude){name}" for name in withheld]
        output = _failed(await repository.run(*command, *excluded))
        marks = "".join(f"[content of {name} withheld: sensitive path]\n" for name in withheld)
        if marks:
            output.text += ("\n" if output.text and not output.text.endswith("\n") else "") + marks
        output.withheld = withheld
        return output

    async def _diff(self, repository: GitRepository, arguments: GitDiffArguments) -> _Output:
        staged = ["--cached"] if arguments.staged else []
        paths = list(arguments.paths or ())
        names = await repository.names("diff", "--name-only", "--no-renames", *staged, "--", *paths)
        return await self._withheld_patch(repository, names, "diff", *_PATCH, *staged, "--", *paths)

    async def _show(self, repository: GitRepository, arguments: GitShowArguments) -> _Output:
        commit = await repository.run("rev-parse", "--verify", "--quiet", f"{arguments.revision}^{{commit}}")
        if commit.exit_code != 0:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"revision: {arguments.revision} names no commit")
        sha = commit.stdout.decode().strip()
        # A merge's patch is against its first parent, as the spec says, not Git's combined diff.
        first = "--diff-merges=first-parent"
        names = await repository.names("show", "--name-only", "--no-renames", first, "--format=", sha)
        show = ("show", *_PATCH, first, "--format=medium", "--date=iso-strict", sha, "--")
        return await self._withheld_patch(repository, names, *show)

    async def _add(self, repository: GitRepository, arguments: GitAddArguments) -> _Output:
        # What `git add` would stage: changed tracked files and untracked ones that are not ignored, through
        # every directory and pattern. A deletion stages no content, so only files present count.
        listed = await repository.names(
            "ls-files", "--full-name", "--modified", "--others", "--exclude-standard", "--", *arguments.paths
        )
        present = [name for name in dict.fromkeys(listed) if os.path.lexists(repository.top / name)]
        self._refuse(self.sensitive(repository, present), "git_add would stage")
        return _failed(await repository.run("add", "--", *arguments.paths))

    async def _commit(self, repository: GitRepository, arguments: GitCommitArguments) -> _Output:
        for setting in ("user.name", "user.email"):
            if (await repository.run("config", "--get", setting)).exit_code != 0:
                return _Output(
                    text=f"git_commit needs an identity: {setting} is not set (git config {setting} ...)\n",
                    exit_code=1,
                )
        staged = await repository.names("diff", "--cached", "--name-only", "--no-renames", "--diff-filter=d")
        self._refuse(self.sensitive(repository, staged), "the index holds")
        return _failed(await repository.run("commit", "--no-verify", "--no-edit", "-m", arguments.message))

    async def _checkout(self, repository: GitRepository, arguments: GitCheckoutArguments) -> _Output:
        target = await repository.run("rev-parse", "--verify", "--quiet", f"{arguments.target}^{{commit}}")
        if target.exit_code != 0:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"target: {arguments.target} names no commit")
        sha = target.stdout.decode().strip()
        head = await repository.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        if head.exit_code == 0:
            written = await repository.names(
                "diff", "--name-only", "--no-renames", "--diff-filter=d", head.stdout.decode().strip(), sha
            )
        else:
            written = await repository.names("ls-tree", "-r", "--name-only", sha)
        self._refuse(self.sensitive(repository, written), "git_checkout would write")
        return _failed(await repository.run("checkout", "--no-recurse-submodules", arguments.target, "--"))
