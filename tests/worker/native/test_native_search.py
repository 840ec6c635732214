"""The search tools of the native worker: search_content through the real ripgrep and search_files, by what a
caller sees: the lines and paths found, their bounds, and what is never shown (spec: search.schema.json).

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, SESSION, Spawner, carrying, code, ok, run_tool, until
from wuu.generated.catalog import WORKER_SEARCH_LINE_MAX_CHARS
from wuu.worker.client import WorkerClient

pytestmark = pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep (rg) is not installed")


def lines(result: dict[str, object]) -> list[str]:
    output = result["output"]
    assert isinstance(output, str)
    return output.splitlines()


# --- search_content ---------------------------------------------------------------------------------------


async def test_search_content_shows_matching_lines_as_path_line_text(
    worker: WorkerClient, root: Path
) -> None:
    (root / "src" / "deep").mkdir(parents=True)
    (root / "a.txt").write_text("hello world\nnothing\nHello again\n")
    (root / "src" / "deep" / "b.py").write_text("x = 1\nprint('hello')\n")
    result = ok(await run_tool(worker, "search_content", pattern="hello"))
    assert lines(result) == ["a.txt:1:hello world", "src/deep/b.py:2:print('hello')"]
    assert result["is_error"] is False
    assert result["metadata"] == {"matches": 2, "files": 2, "truncated": False}
    insensitive = ok(
        await run_tool(worker, "search_content", pattern="hello", case_sensitive=False, path="a.txt")
    )
    assert lines(insensitive) == ["a.txt:1:hello world", "a.txt:3:Hello again"]


async def test_search_content_walks_in_path_order_directory_by_directory(
    worker: WorkerClient, root: Path
) -> None:
    # Each directory's entries by name: the directory `a` (and all below it) before the file `a.txt`.
    (root / "a").mkdir()
    (root / "a" / "z.txt").write_text("hit\n")
    (root / "a.txt").write_text("hit\n")
    (root / "B.txt").write_text("hit\n")
    assert lines(ok(await run_tool(worker, "search_content", pattern="hit"))) == [
        "B.txt:1:hit",
        "a/z.txt:1:hit",
        "a.txt:1:hit",
    ]


async def test_search_content_filters_by_glob_and_reads_literal_patterns(
    worker: WorkerClient, root: Path
) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("call(x)\n")
    (root / "src" / "a.js").write_text("call(x)\n")
    (root / "src" / "test_a.py").write_text("call(x)\n")
    literal = ok(await run_tool(worker, "search_content", pattern="call(x)", literal=True, globs=["*.py"]))
    assert lines(literal) == ["src/a.py:1:call(x)", "src/test_a.py:1:call(x)"]
    excluded = ok(
        await run_tool(worker, "search_content", pattern="call", path="src", globs=["*.py", "!test_*"])
    )
    assert lines(excluded) == ["src/a.py:1:call(x)"]
    # As a regular expression, `(x)` is a group: `call(x)` finds `callx`, not `call(x)`.
    assert lines(ok(await run_tool(worker, "search_content", pattern="call(x)"))) == []


async def test_search_content_bounds_its_results_and_its_lines(worker: WorkerClient, root: Path) -> None:
    (root / "many.txt").write_text("".join(f"match {n}\n" for n in range(10)))
    (root / "long.txt").write_text("needle " + "x" * 300_000 + "\n")
    bounded = ok(await run_tool(worker, "search_content", pattern="match", max_results=3))
    assert lines(bounded)[:3] == ["many.txt:1:match 0", "many.txt:2:match 1", "many.txt:3:match 2"]
    assert "left out" in lines(bounded)[3] and len(lines(bounded)) == 4
    assert bounded["metadata"] == {"matches": 3, "files": 1, "truncated": True}
    exact = ok(await run_tool(worker, "search_content", pattern="match", max_results=10))
    assert exact["metadata"] == {"matches": 10, "files": 1, "truncated": False}
    (long,) = lines(ok(await run_tool(worker, "search_content", pattern="needle")))
    assert long == "long.txt:1:" + ("needle " + "x" * 300_000)[:WORKER_SEARCH_LINE_MAX_CHARS] + "…"


async def test_search_content_skips_hidden_files_and_never_searches_git(
    worker: WorkerClient, root: Path
) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("needle in git\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "notes.txt").write_text("needle hidden\n")
    (root / "plain.txt").write_text("needle plain\n")
    assert lines(ok(await run_tool(worker, "search_content", pattern="needle"))) == [
        "plain.txt:1:needle plain"
    ]
    hidden = ok(await run_tool(worker, "search_content", pattern="needle", include_hidden=True, globs=["**"]))
    assert lines(hidden) == [".hidden/notes.txt:1:needle hidden", "plain.txt:1:needle plain"]


@pytest.mark.parametrize("mode", ["standard", "read_only", "unconfined"])
async def test_search_content_never_shows_a_line_of_a_sensitive_file(
    spawn: Spawner, root: Path, tmp_path: Path, mode: str
) -> None:
    wuu_home = tmp_path / "wuu-home"
    wuu_home.mkdir()
    (wuu_home / "auth.json").write_text('{"needle": "wuu credential"}\n')
    os.link(wuu_home / "auth.json", root / "innocent.json")
    (root / ".env").write_text("needle=env\n")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_ed25519").write_text("needle key\n")
    (root / "server.key").write_text("needle server key\n")
    (root / "ok.txt").write_text("needle ok\n")
    client = await spawn(WUU_HOME=str(wuu_home))
    await client.connect(str(root), SESSION)
    result = ok(await run_tool(client, "search_content", mode=mode, pattern="needle", include_hidden=True))
    assert lines(result) == ["ok.txt:1:needle ok"]
    assert result["metadata"] == {"matches": 1, "files": 1, "truncated": False}
    # Naming the file itself finds nothing either; Wuu's credential file, read-blocked, is refused as read_file is.
    assert lines(ok(await run_tool(client, "search_content", mode=mode, pattern="needle", path=".env"))) == []
    if mode == "unconfined":
        refused = await run_tool(
            client, "search_content", mode=mode, pattern="x", path=str(wuu_home / "auth.json")
        )
        assert code(refused) == "sensitive_path"


@pytest.mark.parametrize("mode", ["standard", "read_only"])
async def test_search_content_stays_inside_the_root(
    worker: WorkerClient, root: Path, outside: Path, mode: str
) -> None:
    (root / "link").symlink_to(outside)
    (root / "file-link").symlink_to(outside / "secret.txt")
    (root / "in.txt").write_text("outside secret, but inside\n")
    result = ok(await run_tool(worker, "search_content", mode=mode, pattern="secret"))
    assert lines(result) == ["in.txt:1:outside secret, but inside"]
    for path in ("../outside", str(outside), "link", "file-link"):
        assert (
            code(await run_tool(worker, "search_content", mode=mode, pattern="x", path=path))
            == "path_outside_root"
        )


async def test_search_content_redacts_secrets_in_the_lines_it_shows(worker: WorkerClient, root: Path) -> None:
    (root / "deploy.sh").write_text(
        "export DB_PASSWORD=hunter2hunter2\ncurl -H 'Authorization: Bearer abcdefghijklmnop0123'\n"
    )
    result = ok(await run_tool(worker, "search_content", pattern="PASSWORD|Bearer"))
    assert lines(result) == [
        "deploy.sh:1:export DB_PASSWORD=[REDACTED:secret-assignment]",
        "deploy.sh:2:curl -H 'Authorization: Bearer [REDACTED:bearer-token]'",
    ]
    # The file itself is unchanged and read_file shows it whole: redaction is of search output only.
    assert "hunter2hunter2" in ok(await run_tool(worker, "read_file", path="deploy.sh"))["output"]


async def test_search_content_refuses_bad_patterns_and_missing_paths(
    worker: WorkerClient, root: Path
) -> None:
    assert code(await run_tool(worker, "search_content", pattern="(")) == "invalid_request"
    assert code(await run_tool(worker, "search_content", pattern="x", path="missing")) == "not_found"
    assert code(await run_tool(worker, "search_content", pattern="x", globs=["*.[ch]"])) == "invalid_request"


async def test_search_content_without_ripgrep_is_unsupported_and_names_it(spawn: Spawner, root: Path) -> None:
    # A PATH without rg: the worker finds no ripgrep, and says so instead of searching some other way.
    client = await spawn(PATH=str(root))
    await client.connect(str(root), SESSION)
    (root / "a.txt").write_text("needle\n")
    reply = await run_tool(client, "search_content", pattern="needle")
    assert code(reply) == "unsupported_tool"
    assert "ripgrep" in reply["error"]


async def test_cancelling_search_content_ends_ripgrep(worker: WorkerClient, root: Path) -> None:
    # A sparse file of 64 GiB named as the path: rg reads it to its end, far longer than the test waits.
    with open(root / "huge.bin", "wb") as huge:
        huge.truncate(64 << 30)
    marker = f"absent-{uuid.uuid4().hex}"
    pending = asyncio.create_task(run_tool(worker, "search_content", pattern=marker, path="huge.bin"))
    await until(lambda: carrying(marker), "rg runs")
    request_id = next(
        json.loads(raw)["id"] for direction, raw in worker.transcript.entries if b'"search_content"' in raw
    )
    assert ok(await worker.request("cancel", {"id": request_id})) == {"cancelled": True}
    assert code(await asyncio.wait_for(pending, DEADLINE)) == "cancelled"
    assert carrying(marker) == []


# --- search_files -----------------------------------------------------------------------------------------


async def test_search_files_lists_matching_paths_sorted(worker: WorkerClient, root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    for name in ("src/a.py", "src/pkg/b.py", "src/pkg/c.txt", "top.py", ".hidden.py"):
        (root / name).write_text("x")
    (root / "src" / "pkg.py").mkdir()
    result = ok(await run_tool(worker, "search_files", pattern="*.py"))
    assert lines(result) == ["src/a.py", "src/pkg.py/", "src/pkg/b.py", "top.py"]
    assert result["metadata"] == {"paths": lines(result), "truncated": False}
    anchored = ok(await run_tool(worker, "search_files", pattern="pkg/*.{py,txt}", path="src"))
    assert lines(anchored) == ["src/pkg/b.py", "src/pkg/c.txt"]
    deep = ok(await run_tool(worker, "search_files", pattern="src/**/*.py", include_hidden=True))
    assert lines(deep) == ["src/a.py", "src/pkg.py/", "src/pkg/b.py"]
    bounded = ok(await run_tool(worker, "search_files", pattern="*.py", max_results=2))
    assert lines(bounded)[:2] == ["src/a.py", "src/pkg.py/"] and "left out" in lines(bounded)[2]
    assert bounded["metadata"] == {"paths": ["src/a.py", "src/pkg.py/"], "truncated": True}


async def test_search_files_never_follows_symlinks_nor_enters_git(
    worker: WorkerClient, root: Path, outside: Path
) -> None:
    (root / "link").symlink_to(outside)
    (root / ".git").mkdir()
    (root / ".git" / "secret.txt").write_text("x")
    (root / ".env").write_text("K=1")
    result = ok(await run_tool(worker, "search_files", pattern="*", include_hidden=True))
    # The link is an entry of its own, not descended into; a sensitive name is listed as list_dir lists it.
    assert lines(result) == [".env", "link"]
    assert code(await run_tool(worker, "search_files", pattern="*", path="link")) == "path_outside_root"
    assert code(await run_tool(worker, "search_files", pattern="*", path=".env")) == "invalid_request"
