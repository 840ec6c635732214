"""Path confinement on the native worker: confined modes refuse paths that leave the root, by `..`, by an
absolute path or through a symlink; `unconfined` may leave it.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import code, ok, run_tool, same_path
from wuu.worker.client import WorkerClient

ESCAPE_KINDS = ["dotdot", "absolute", "symlink-file", "symlink-dir", "dangling-symlink"]
CONFINED = ["standard", "read_only"]


@pytest.mark.parametrize("mode", CONFINED)
@pytest.mark.parametrize("kind", ESCAPE_KINDS)
async def test_confined_reads_that_leave_the_root_get_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], kind: str, mode: str
) -> None:
    assert code(await run_tool(worker, "read_file", mode=mode, path=escapes[kind])) == "path_outside_root"


@pytest.mark.parametrize("mode", CONFINED)
async def test_confined_list_dir_and_cwd_outside_the_root_get_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], outside: Path, mode: str
) -> None:
    for path in ("link_dir", "..", str(outside)):
        assert code(await run_tool(worker, "list_dir", mode=mode, path=path)) == "path_outside_root", path
        reply = await run_tool(worker, "exec_command", mode=mode, argv=["pwd"], cwd=path)
        assert code(reply) == "path_outside_root", path


@pytest.mark.parametrize("kind", ESCAPE_KINDS)
async def test_standard_writes_that_leave_the_root_are_refused_and_change_nothing(
    worker: WorkerClient, escapes: dict[str, str], outside: Path, kind: str
) -> None:
    before = sorted(p.name for p in outside.iterdir())
    reply = await run_tool(worker, "write_file", path=escapes[kind], content="escaped")
    assert code(reply) == "path_outside_root"
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_text() == "outside secret"
    reply = await run_tool(worker, "edit_file", path=escapes[kind], old_string="outside", new_string="inside")
    assert code(reply) == "path_outside_root"
    assert (outside / "secret.txt").read_text() == "outside secret"


async def test_a_path_is_resolved_component_by_component(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("a")
    # `..` leaves the root on the way, even though the path comes back into it.
    reply = await run_tool(worker, "read_file", path=f"../{root.name}/a.txt")
    assert code(reply) == "path_outside_root"
    assert ok(await run_tool(worker, "read_file", path=str(root / "a.txt")))["output"] == "a"
    assert ok(await run_tool(worker, "read_file", path="sub/../a.txt"))["output"] == "a"


@pytest.mark.parametrize("mode", CONFINED)
async def test_process_start_with_a_cwd_outside_the_root_gets_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], outside: Path, mode: str
) -> None:
    for cwd in ("link_dir", "..", str(outside)):
        reply = await worker.request("process/start", {"argv": ["pwd"], "cwd": cwd, "permission_mode": mode})
        assert code(reply) == "path_outside_root", cwd
    assert ok(await worker.request("process/list", {})) == {"processes": []}


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink-file", "symlink-dir"])
async def test_unconfined_reads_may_leave_the_root(
    worker: WorkerClient, escapes: dict[str, str], kind: str
) -> None:
    result = ok(await run_tool(worker, "read_file", mode="unconfined", path=escapes[kind]))
    assert result["output"] == "outside secret"


async def test_unconfined_writes_list_dir_and_cwd_may_leave_the_root(
    worker: WorkerClient, escapes: dict[str, str], outside: Path
) -> None:
    ok(await run_tool(worker, "write_file", mode="unconfined", path="dangling", content="through the link"))
    assert (outside / "nothing-yet.txt").read_text() == "through the link"
    ok(await run_tool(worker, "write_file", mode="unconfined", path="../outside/new.txt", content="n"))
    assert (outside / "new.txt").read_text() == "n"
    listing = ok(await run_tool(worker, "list_dir", mode="unconfined", path="link_dir"))
    assert listing["output"].splitlines() == ["new.txt", "nothing-yet.txt", "secret.txt"]
    pwd = ok(await run_tool(worker, "exec_command", mode="unconfined", argv=["pwd"], cwd=str(outside)))
    assert same_path(pwd["output"].strip(), outside)


async def test_a_symlink_that_stays_inside_the_root_is_allowed_in_standard(
    worker: WorkerClient, root: Path
) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "real.txt").write_text("inside")
    (root / "alias.txt").symlink_to("sub/real.txt")
    (root / "sub" / "up").symlink_to("..")
    assert ok(await run_tool(worker, "read_file", path="alias.txt"))["output"] == "inside"
    assert ok(await run_tool(worker, "read_file", path="sub/up/sub/real.txt"))["output"] == "inside"


async def test_standard_refuses_writes_to_a_file_with_several_hard_links(
    worker: WorkerClient, root: Path, outside: Path
) -> None:
    secret = outside / "secret.txt"
    os.link(secret, root / "linked.txt")
    before = secret.stat()
    reply = await run_tool(worker, "write_file", path="linked.txt", content="overwritten")
    assert code(reply) == "path_outside_root"
    reply = await run_tool(worker, "edit_file", path="linked.txt", old_string="outside", new_string="inside")
    assert code(reply) == "path_outside_root"
    after = secret.stat()
    assert secret.read_text() == "outside secret" and after.st_mtime_ns == before.st_mtime_ns
    # Reading it is no escape of a write, and unconfined lifts the boundary.
    assert ok(await run_tool(worker, "read_file", path="linked.txt"))["output"] == "outside secret"
    ok(await run_tool(worker, "write_file", mode="unconfined", path="linked.txt", content="changed"))
    assert secret.read_text() == "changed"


@pytest.mark.parametrize("path", ["n" * 300, "in\0.txt", "../outside\0/secret.txt"])
async def test_an_overlong_name_or_a_nul_byte_is_an_invalid_request(worker: WorkerClient, path: str) -> None:
    calls = (
        ("read_file", {}),
        ("write_file", {"content": "x"}),
        ("edit_file", {"old_string": "a", "new_string": "b"}),
    )
    for tool, arguments in (*calls, ("list_dir", {})):
        reply = await run_tool(worker, tool, path=path, **arguments)
        assert code(reply) == "invalid_request", tool
