"""initialize on the native worker: the workspace root it binds, creates, keeps or removes, and the
capabilities it grants.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import DEADLINE, SESSION, Spawner, binding, code, ok, run_tool


async def test_require_existing_workspace_with_a_missing_root_gets_workspace_missing(
    spawn: Spawner, tmp_path: Path
) -> None:
    client = await spawn()
    missing = tmp_path / "missing"
    reply = await client.request("initialize", binding(missing, require_existing_workspace=True))
    assert code(reply) == "workspace_missing"
    assert not missing.exists()


async def test_a_missing_root_is_created_when_it_is_not_required(spawn: Spawner, tmp_path: Path) -> None:
    client = await spawn()
    missing = tmp_path / "a" / "b" / "ws"
    await client.connect(str(missing), SESSION, require_existing_workspace=False)
    assert missing.is_dir()
    ok(await run_tool(client, "write_file", path="f.txt", content="x"))
    assert (missing / "f.txt").read_text() == "x"


async def test_remove_workspace_on_exit_removes_the_root_after_close(spawn: Spawner, root: Path) -> None:
    client = await spawn()
    await client.connect(str(root), SESSION, remove_workspace_on_exit=True)
    ok(await run_tool(client, "write_file", path="sub/f.txt", content="x", create_dirs=True))
    assert (root / "sub" / "f.txt").exists()
    outcome = await client.close(budget=DEADLINE)
    assert outcome.clean, outcome
    assert not root.exists()


async def test_the_root_is_kept_after_close_by_default(spawn: Spawner, root: Path) -> None:
    client = await spawn()
    await client.connect(str(root), SESSION)
    ok(await run_tool(client, "write_file", path="f.txt", content="kept"))
    assert (await client.close(budget=DEADLINE)).clean
    assert (root / "f.txt").read_text() == "kept"


async def test_process_start_v1_is_granted_only_when_requested(spawn: Spawner, root: Path) -> None:
    plain = await spawn()
    assert (await plain.connect(str(root), SESSION)).capabilities == []
    asking = await spawn()
    granted = await asking.connect(str(root), SESSION, capabilities=["process.start.v1"])
    assert granted.capabilities == ["process.start.v1"]
