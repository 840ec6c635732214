"""The Git tools of the native worker on real repositories: what they show and change, the sensitive staging and
commit guard, no hook or configured program ever running, the permission modes (spec: git.schema.json).

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py). Each repository is a real
`git init` in the test's root with its identity in the repository's own configuration; the worker's HOME is an
empty directory, so that nothing of the user's Git configuration takes part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import SESSION, Spawner, code, ok, run_tool
from wuu.generated.catalog import WORKER_GIT_OUTPUT_MAX_BYTES
from wuu.worker.client import WorkerClient

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="Git (git) is not installed")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home directory: no global Git configuration, no identity."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def git(root: Path, home: Path, *arguments: str) -> str:
    """Run git in `root` as a user would, outside the tools; its stdout."""
    environment = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", *arguments], cwd=root, env=environment, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture
def repository(root: Path, home: Path) -> Path:
    """A repository at the root with one commit (README.md) and an identity of its own."""
    git(root, home, "init", "-q", "-b", "main")
    git(root, home, "config", "user.name", "Test User")
    git(root, home, "config", "user.email", "test@example.com")
    (root / "README.md").write_text("hello\n")
    git(root, home, "add", "README.md")
    git(root, home, "commit", "-q", "-m", "first")
    return root


@pytest.fixture
async def client(spawn: Spawner, root: Path, home: Path, repository: Path) -> WorkerClient:
    worker = await spawn(HOME=str(home))
    await worker.connect(str(root), SESSION)
    return worker


def output(reply: dict[str, object]) -> str:
    data = ok(reply)  # type: ignore[arg-type]
    assert data["is_error"] is False, data
    text = data["output"]
    assert isinstance(text, str)
    return text


def staged(root: Path, home: Path) -> list[str]:
    return git(root, home, "diff", "--cached", "--name-only").split()


async def test_the_git_tools_stage_commit_and_show_history(
    client: WorkerClient, root: Path, home: Path
) -> None:
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "README.md").write_text("hello\nworld\n")
    status = output(await run_tool(client, "git_status"))
    assert status.splitlines() == ["## main", " M README.md", "?? src/app.py"]
    assert "+world" in output(await run_tool(client, "git_diff"))
    assert output(await run_tool(client, "git_add", paths=["."])) == ""
    assert staged(root, home) == ["README.md", "src/app.py"]
    assert output(await run_tool(client, "git_diff")) == ""
    assert "+print('hi')" in output(await run_tool(client, "git_diff", staged=True, paths=["src"]))
    committed = ok(await run_tool(client, "git_commit", message="Add the app"))
    assert committed["is_error"] is False and committed["metadata"]["exit_code"] == 0
    assert git(root, home, "log", "--format=%s").splitlines() == ["Add the app", "first"]
    log = output(await run_tool(client, "git_log", max_count=1))
    assert "Author: Test User <test@example.com>" in log and "    Add the app" in log and "first" not in log
    shown = output(await run_tool(client, "git_show", revision="HEAD~1"))
    assert "    first" in shown and "+hello" in shown
    assert output(await run_tool(client, "git_branch", create="feature")) == ""
    assert output(await run_tool(client, "git_branch")).splitlines() == ["  feature", "* main"]
    ok(await run_tool(client, "git_checkout", target="feature"))
    assert git(root, home, "branch", "--show-current").strip() == "feature"
    ok(await run_tool(client, "git_checkout", target="HEAD~1"))
    assert not (root / "src" / "app.py").exists()


@pytest.mark.parametrize(
    ("paths", "refused"),
    [
        ([".env"], ".env"),
        (["."], ".env"),
        (["config/"], "config/.env.local"),
        (["keys/*"], "keys/deploy.key"),
    ],
)
async def test_git_add_refuses_a_sensitive_path_also_through_a_directory_or_a_pattern(
    client: WorkerClient, root: Path, home: Path, paths: list[str], refused: str
) -> None:
    (root / ".env").write_text("TOKEN=1\n")
    (root / "config").mkdir()
    (root / "config" / ".env.local").write_text("TOKEN=2\n")
    (root / "config" / "app.toml").write_text("x = 1\n")
    (root / "keys").mkdir()
    (root / "keys" / "deploy.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    (root / "notes.txt").write_text("notes\n")
    reply = await run_tool(client, "git_add", paths=paths)
    assert code(reply) == "sensitive_path"
    assert refused in reply["error"]
    assert staged(root, home) == []  # all of it refused, nothing staged
    # The committed template is no sensitive path, and neither is a file beside the refused one.
    (root / ".env.example").write_text("TOKEN=\n")
    output(await run_tool(client, "git_add", paths=[".env.example", "config/app.toml", "notes.txt"]))
    assert staged(root, home) == [".env.example", "config/app.toml", "notes.txt"]


async def test_git_add_refuses_a_hard_link_to_a_wuu_credential_file(
    spawn: Spawner, root: Path, home: Path, repository: Path, tmp_path: Path
) -> None:
    wuu_home = tmp_path / "wuu-home"
    wuu_home.mkdir()
    (wuu_home / "auth.json").write_text('{"token": "t"}\n')
    os.link(wuu_home / "auth.json", root / "innocent.json")
    worker = await spawn(HOME=str(home), WUU_HOME=str(wuu_home))
    await worker.connect(str(root), SESSION)
    reply = await run_tool(worker, "git_add", paths=["."])
    assert code(reply) == "sensitive_path" and "innocent.json" in reply["error"]
    assert staged(root, home) == []


async def test_git_commit_refuses_a_sensitive_path_staged_outside_the_tools(
    client: WorkerClient, root: Path, home: Path
) -> None:
    (root / ".env").write_text("TOKEN=1\n")
    (root / "a.txt").write_text("a\n")
    git(root, home, "add", ".env", "a.txt")
    reply = await run_tool(client, "git_commit", message="oops")
    assert code(reply) == "sensitive_path" and ".env" in reply["error"]
    assert git(root, home, "log", "--format=%s").splitlines() == ["first"]
    git(root, home, "rm", "-q", "--cached", ".env")
    output(await run_tool(client, "git_commit", message="only a"))
    assert git(root, home, "show", "--name-only", "--format=", "HEAD").split() == ["a.txt"]


async def test_git_diff_and_git_show_withhold_the_content_of_sensitive_files(
    client: WorkerClient, root: Path, home: Path
) -> None:
    # Committed by the user, outside the tools: the tools still never show what it holds.
    (root / ".env").write_text("API_KEY=first-secret-value\n")
    (root / "app.txt").write_text("visible one\n")
    git(root, home, "add", ".env", "app.txt")
    git(root, home, "commit", "-q", "-m", "with env")
    (root / ".env").write_text("API_KEY=second-secret-value\n")
    (root / "app.txt").write_text("visible two\n")
    for reply in (
        await run_tool(client, "git_diff"),
        await run_tool(client, "git_show", revision="HEAD"),
    ):
        text = output(reply)
        assert "secret-value" not in text and "API_KEY" not in text
        assert "visible" in text
        assert "[content of .env withheld: sensitive path]" in text
        assert ok(reply)["metadata"]["withheld"] == [".env"]
    # A revision that names a file, not a commit, is refused: file content is the file tools' to show.
    assert code(await run_tool(client, "git_show", revision="HEAD:.env")) == "invalid_request"


async def test_git_output_is_redacted_and_bounded(client: WorkerClient, root: Path, home: Path) -> None:
    (root / "deploy.sh").write_text("export DB_PASSWORD=hunter2hunter2\n")
    shown = output(await run_tool(client, "git_diff", paths=["deploy.sh"]))
    assert shown == ""  # untracked: no diff yet
    output(await run_tool(client, "git_add", paths=["deploy.sh"]))
    shown = output(await run_tool(client, "git_diff", staged=True))
    assert "+export DB_PASSWORD=[REDACTED:secret-assignment]" in shown and "hunter2" not in shown
    (root / "big.txt").write_text("line of text\n" * 40000)
    output(await run_tool(client, "git_add", paths=["big.txt"]))
    reply = ok(await run_tool(client, "git_diff", staged=True))
    assert reply["metadata"]["truncated"] is True
    assert reply["output"].endswith(f"[output cut at {WORKER_GIT_OUTPUT_MAX_BYTES} bytes]")
    assert len(reply["output"].encode()) < WORKER_GIT_OUTPUT_MAX_BYTES + 100


async def test_git_commit_runs_no_hook_and_no_configured_program(
    client: WorkerClient, root: Path, home: Path, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for directory in (root / ".git" / "hooks", hooks):
        for name in ("pre-commit", "commit-msg", "post-commit", "post-checkout"):
            script = directory / name
            script.write_text(f"#!/bin/sh\necho {name} >> {ran}\n")
            script.chmod(0o755)
    program = tmp_path / "program.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> {ran}\ncat\n')
    program.chmod(0o755)
    git(root, home, "config", "core.hooksPath", str(hooks))
    git(root, home, "config", "core.fsmonitor", str(program))
    git(root, home, "config", "filter.tidy.clean", str(program))
    git(root, home, "config", "filter.tidy.smudge", str(program))
    git(root, home, "config", "diff.external", str(program))
    git(root, home, "config", "core.pager", str(program))
    (root / ".gitattributes").write_text("*.txt filter=tidy\n")
    (root / "a.txt").write_text("a\n")
    output(await run_tool(client, "git_status"))
    output(await run_tool(client, "git_add", paths=["."]))
    output(await run_tool(client, "git_commit", message="no hooks"))
    (root / "a.txt").write_text("b\n")
    assert "+b" in output(await run_tool(client, "git_diff"))
    output(await run_tool(client, "git_show", revision="HEAD"))
    (root / "a.txt").write_text("a\n")
    output(await run_tool(client, "git_checkout", target="HEAD~1"))
    output(await run_tool(client, "git_checkout", target="main"))  # writes a.txt: no smudge filter runs
    assert (root / "a.txt").read_text() == "a\n"
    assert git(root, home, "log", "--format=%s", "main").splitlines() == ["no hooks", "first"]
    assert not ran.exists(), ran.read_text()


async def test_read_only_refuses_the_mutating_git_tools(client: WorkerClient, root: Path, home: Path) -> None:
    (root / "a.txt").write_text("a\n")
    for tool, arguments in (
        ("git_add", {"paths": ["a.txt"]}),
        ("git_commit", {"message": "m"}),
        ("git_checkout", {"target": "main"}),
        ("git_branch", {"create": "b"}),
    ):
        assert code(await run_tool(client, tool, mode="read_only", **arguments)) == "permission_denied"
    assert staged(root, home) == [] and git(root, home, "branch").split() == ["*", "main"]
    assert "?? a.txt" in output(await run_tool(client, "git_status", mode="read_only"))
    assert output(await run_tool(client, "git_branch", mode="read_only")) == "* main\n"
    assert "first" in output(await run_tool(client, "git_log", mode="read_only"))


async def test_git_checkout_refuses_to_write_a_sensitive_path(
    client: WorkerClient, root: Path, home: Path
) -> None:
    git(root, home, "checkout", "-q", "-b", "other")
    (root / ".env").write_text("TOKEN=1\n")
    git(root, home, "add", ".env")
    git(root, home, "commit", "-q", "-m", "env")
    git(root, home, "checkout", "-q", "main")
    reply = await run_tool(client, "git_checkout", target="other")
    assert code(reply) == "sensitive_path" and ".env" in reply["error"]
    assert not (root / ".env").exists()


@pytest.mark.parametrize("mode", ["standard", "read_only"])
async def test_the_repository_must_lie_under_the_root(
    spawn: Spawner, tmp_path: Path, home: Path, outside: Path, mode: str
) -> None:
    # The root is a directory inside a bigger repository: Git does not look above the root.
    git(tmp_path, home, "init", "-q")
    root = tmp_path / "inner"
    root.mkdir()
    worker = await spawn(HOME=str(home))
    await worker.connect(str(root), SESSION)
    reply = ok(await run_tool(worker, "git_status", mode=mode))
    assert reply["is_error"] is True and "not a git repository" in reply["output"]
    assert code(await run_tool(worker, "git_status", mode=mode, path="..")) == "path_outside_root"
    # A `.git` file that points at a Git directory outside the root.
    git(outside, home, "init", "-q")
    (root / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    assert code(await run_tool(worker, "git_status", mode=mode)) == "path_outside_root"


async def test_git_commit_without_an_identity_names_the_missing_setting(
    client: WorkerClient, root: Path, home: Path
) -> None:
    git(root, home, "config", "--unset", "user.email")
    (root / "a.txt").write_text("a\n")
    output(await run_tool(client, "git_add", paths=["a.txt"]))
    reply = ok(await run_tool(client, "git_commit", message="m"))
    assert reply["is_error"] is True and "user.email" in reply["output"]
    assert git(root, home, "log", "--format=%s").splitlines() == ["first"]


async def test_the_git_tools_without_git_are_unsupported_and_name_it(
    spawn: Spawner, root: Path, home: Path, repository: Path
) -> None:
    worker = await spawn(HOME=str(home), PATH=str(root))
    await worker.connect(str(root), SESSION)
    reply = await run_tool(worker, "git_status")
    assert code(reply) == "unsupported_tool" and "Git" in reply["error"]


async def test_git_show_of_a_merge_shows_its_patch_against_the_first_parent(
    client: WorkerClient, root: Path, home: Path
) -> None:
    git(root, home, "checkout", "-q", "-b", "side")
    (root / ".env").write_text("TOKEN=merged-secret\n")
    (root / "side.txt").write_text("from side\n")
    git(root, home, "add", ".env", "side.txt")
    git(root, home, "commit", "-q", "-m", "side work")
    git(root, home, "checkout", "-q", "main")
    git(root, home, "merge", "-q", "--no-ff", "--no-edit", "side")
    reply = ok(await run_tool(client, "git_show", revision="HEAD"))
    assert "+from side" in reply["output"] and "merged-secret" not in reply["output"]
    assert reply["metadata"]["withheld"] == [".env"]
    (root / "file.txt").write_text("x\n")
    assert code(await run_tool(client, "git_status", path="file.txt")) == "invalid_request"
