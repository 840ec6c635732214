"""The Git tools: what they show and change, the sensitive staging and commit guard, the withheld diffs, no hook
ever running, the permission modes and the root boundary (spec: worker/git.schema.json).

Every case is skipped, saying so, for an adapter that does not provide the Git tools (`unsupported_tool`). The
repositories are set up with the real `git` through a shell script: here when the root is local, else through
exec_command (the case is skipped when neither is possible).
"""

from __future__ import annotations

import asyncio

from ..session import Session, code_of
from ..suite import WORKER
from .paths import CONFINED
from .tools import answer, local_root, put, refused, result, run, runs_commands

# A repository at the root with one commit and an identity of its own.
_REPOSITORY = """
git init -q -b main
git config user.name 'Conformance'
git config user.email 'conformance@example.com'
printf 'hello\\n' > README.md
git add README.md
git commit -q -m first
"""
_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


async def shell(s: Session, script: str) -> str:
    """Run a shell script in the root (here, or through exec_command); its output. Fails the case when it fails."""
    if await local_root(s):
        process = await asyncio.create_subprocess_exec(
            "sh",
            "-ec",
            script,
            cwd=s.root,
            env=_ENVIRONMENT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        stdout, _ = await process.communicate()
        text = stdout.decode("utf-8", "replace")
        s.expect(process.returncode == 0, f"setting up the repository failed: {text}")
        return text
    mode = await runs_commands(s)
    if mode is None:
        s.skip("no repository can be set up: the root is not local and the adapter runs no commands")
    reply = await s.execute("exec_command", mode, argv=["sh", "-ec", script])
    s.expect(
        "data" in reply and reply["data"]["is_error"] is False,
        f"setting up the repository through exec_command failed: {answer(reply)}",
    )
    output: str = reply["data"]["output"]
    return output


async def repository(s: Session) -> None:
    """Initialize, skip unless the adapter provides the Git tools, and set up a repository at the root."""
    await s.initialize()
    if code_of(await s.execute("git_status")) == "unsupported_tool":
        s.skip("the adapter does not provide the Git tools (git_status: unsupported_tool)")
    if not await local_root(s) and await runs_commands(s) is None:
        s.skip("no repository can be set up: the root is not local and the adapter runs no commands")
    await shell(s, _REPOSITORY)


async def status(s: Session, mode: str = "standard") -> list[str]:
    output: str = (await result(s, "git_status", mode))["output"]
    return output.splitlines()


@WORKER.case("git.tools")
async def tools(s: Session) -> None:
    """git_status, git_diff, git_add, git_commit, git_log, git_show, git_branch and git_checkout do what Git does:
    the porcelain status, the patch, the staged files, a new commit, the history, a branch made and checked
    out."""
    await repository(s)
    await put(s, "README.md", "hello\nworld\n")
    await put(s, "src/app.py", "print('hi')\n")
    shown = await status(s)
    s.expect(shown == ["## main", " M README.md", "?? src/app.py"], f"git_status showed {shown}")
    diff = (await result(s, "git_diff"))["output"]
    s.expect("+world" in diff, f"git_diff does not show the change: {diff!r}")
    await result(s, "git_add", paths=["."])
    shown = await status(s)
    s.expect(
        shown == ["## main", "M  README.md", "A  src/app.py"], f"after git_add ., git_status showed {shown}"
    )
    await result(s, "git_commit", message="Add the app")
    log = (await result(s, "git_log", max_count=1))["output"]
    s.expect("Add the app" in log and "first" not in log, f"git_log with max_count 1 showed {log!r}")
    shown_commit = (await result(s, "git_show", revision="HEAD~1"))["output"]
    s.expect("first" in shown_commit and "+hello" in shown_commit, f"git_show HEAD~1 showed {shown_commit!r}")
    await result(s, "git_branch", create="feature")
    branches = (await result(s, "git_branch"))["output"].splitlines()
    s.expect(branches == ["  feature", "* main"], f"git_branch listed {branches}")
    await result(s, "git_checkout", target="feature")
    s.expect((await status(s))[0] == "## feature", "git_checkout feature did not switch to the branch")


@WORKER.case("git.sensitive-staging")
async def sensitive_staging(s: Session) -> None:
    """git_add refuses with sensitive_path, staging nothing, when it would stage an environment file or a
    private key, named or through a directory or a pattern; git_commit refuses a sensitive path that was
    staged outside the tools."""
    await repository(s)
    await shell(s, "printf 'TOKEN=1\\n' > .env && mkdir -p config && printf 'x\\n' > config/deploy.key")
    await put(s, "notes.txt", "notes\n")
    for paths in ([".env"], ["."], ["config/"], ["*.key", "notes.txt"]):
        await refused(s, "sensitive_path", "git_add", paths=paths)
        shown = await status(s)
        s.expect(
            not any(line[0] in "MADRC" for line in shown[1:]),
            f"git_add {paths} was refused but staged something: git_status shows {shown}",
        )
    await shell(s, "git add .env notes.txt")
    await refused(s, "sensitive_path", "git_commit", message="with env")
    log = (await result(s, "git_log"))["output"]
    s.expect("with env" not in log, f"git_commit was refused but committed: {log!r}")


@WORKER.case("git.withheld")
async def withheld(s: Session) -> None:
    """git_diff and git_show never show the content of a sensitive path: its part is replaced by a line
    saying it was withheld, and `withheld` names it."""
    await repository(s)
    await shell(
        s,
        "printf 'needle-first\\n' > .env && printf 'visible one\\n' > app.txt && git add .env app.txt"
        " && git commit -q -m 'with env' && printf 'needle-second\\n' > .env && printf 'visible two\\n' > app.txt",
    )
    for tool, arguments in (("git_diff", {}), ("git_show", {"revision": "HEAD"})):
        data = await result(s, tool, **arguments)
        output: str = data["output"]
        s.expect("needle" not in output, f"{tool} showed the content of .env: {output!r}")
        s.expect("visible" in output, f"{tool} did not show the change of app.txt: {output!r}")
        s.expect(
            "[content of .env withheld: sensitive path]" in output
            and data["metadata"]["withheld"] == [".env"],
            f"{tool} did not say that .env was withheld: {output!r}, {data['metadata']}",
        )


@WORKER.case("git.no-hooks")
async def no_hooks(s: Session) -> None:
    """git_commit and git_checkout run no repository hook, whatever the repository's configuration says."""
    await repository(s)
    script = "".join(
        f"printf '#!/bin/sh\\ntouch hook-{name}\\n' > .git/hooks/{name} && chmod +x .git/hooks/{name}\n"
        for name in ("pre-commit", "commit-msg", "post-commit", "post-checkout")
    )
    await shell(s, script + "git config core.hooksPath .git/hooks\n")
    await put(s, "a.txt", "a\n")
    await result(s, "git_add", paths=["a.txt"])
    await result(s, "git_commit", message="no hooks")
    await result(s, "git_checkout", target="HEAD~1")
    listed = (await result(s, "list_dir", path="."))["output"]
    s.expect("hook-" not in listed, f"a hook ran: the root holds {listed!r}")
    log = (await result(s, "git_log", revision="main"))["output"]
    s.expect("no hooks" in log, f"git_commit made no commit: {log!r}")


@WORKER.case("git.read-only")
async def read_only(s: Session) -> None:
    """read_only refuses git_add, git_commit, git_checkout and git_branch with create with permission_denied;
    git_status, git_log and the branch list run."""
    await repository(s)
    await put(s, "a.txt", "a\n")
    for tool, arguments in (
        ("git_add", {"paths": ["a.txt"]}),
        ("git_commit", {"message": "m"}),
        ("git_checkout", {"target": "main"}),
        ("git_branch", {"create": "b"}),
    ):
        await refused(s, "permission_denied", tool, "read_only", **arguments)
    s.expect(
        "?? a.txt" in await status(s, "read_only"), "git_status in read_only does not show a.txt untracked"
    )
    branches = (await result(s, "git_branch", "read_only"))["output"]
    s.expect(branches == "* main\n", f"git_branch in read_only listed {branches!r}")


@WORKER.case("git.boundary")
async def boundary(s: Session) -> None:
    """In standard and read_only, a repository path outside the root gets path_outside_root."""
    await repository(s)
    for mode in CONFINED:
        for path in ("..", "/"):
            reply = await run(s, "git_status", mode, path=path)
            s.expect(
                code_of(reply) == "path_outside_root",
                f"git_status of {path} in {mode} must fail with path_outside_root; it answered {answer(reply)}",
            )
