"""The sensitive-path guard of the native worker: which writes (and, under Wuu home, reads) it refuses,
and in which order it checks the mode, the root and the guard.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import SESSION, Spawner, code, ok, run_tool
from wuu.worker.client import WorkerClient

SENSITIVE_WRITES = [
    ".env",
    ".env.local",
    ".ENV",
    "id_rsa",
    "ID_RSA",
    "credentials.json",
    "sub/.ssh/config",
    "server.key",
    ".aws/credentials",
]


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
@pytest.mark.parametrize("name", SENSITIVE_WRITES)
async def test_writing_a_sensitive_path_gets_sensitive_path(
    worker: WorkerClient, root: Path, name: str, mode: str
) -> None:
    reply = await run_tool(worker, "write_file", mode=mode, path=name, content="SECRET=1", create_dirs=True)
    assert code(reply) == "sensitive_path"
    assert not (root / name).exists()


@pytest.mark.parametrize("name", [".env", "id_rsa"])
async def test_writing_a_sensitive_path_in_read_only_is_refused_by_the_mode_first(
    worker: WorkerClient, root: Path, name: str
) -> None:
    # Refusals are checked in order: the permission mode, the path boundary, the sensitive-path guard.
    reply = await run_tool(worker, "write_file", mode="read_only", path=name, content="SECRET=1")
    assert code(reply) == "permission_denied"
    assert not (root / name).exists()


async def test_the_path_boundary_is_checked_before_the_mode_allows_and_before_sensitive_paths(
    worker: WorkerClient, outside: Path
) -> None:
    reply = await run_tool(worker, "write_file", mode="read_only", path="../outside/x.txt", content="x")
    assert code(reply) == "permission_denied"
    reply = await run_tool(worker, "write_file", path="../outside/.env", content="x")
    assert code(reply) == "path_outside_root"
    reply = await run_tool(worker, "write_file", mode="unconfined", path="../outside/.env", content="x")
    assert code(reply) == "sensitive_path"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
async def test_editing_a_sensitive_path_gets_sensitive_path_and_leaves_it_unchanged(
    worker: WorkerClient, root: Path, mode: str
) -> None:
    (root / ".env").write_text("TOKEN=old\n")
    reply = await run_tool(worker, "edit_file", mode=mode, path=".env", old_string="old", new_string="new")
    assert code(reply) == "sensitive_path"
    assert (root / ".env").read_text() == "TOKEN=old\n"


@pytest.mark.parametrize("mode", ["standard", "read_only", "unconfined"])
async def test_reading_an_environment_file_is_allowed(worker: WorkerClient, root: Path, mode: str) -> None:
    (root / ".env").write_text("TOKEN=abc\n")
    (root / "id_rsa").write_text("KEY\n")
    assert ok(await run_tool(worker, "read_file", mode=mode, path=".env"))["output"] == "TOKEN=abc\n"
    assert ok(await run_tool(worker, "read_file", mode=mode, path="id_rsa"))["output"] == "KEY\n"


@pytest.mark.parametrize("name", ["credentials.go", ".env.example", "id_rsa.pub", "cert.pem", "secrets.txt"])
async def test_names_that_only_look_sensitive_are_writable(
    worker: WorkerClient, root: Path, name: str
) -> None:
    result = ok(await run_tool(worker, "write_file", path=name, content="package main\n"))
    assert result["metadata"]["created"] is True
    assert (root / name).read_text() == "package main\n"


async def test_a_symlink_to_a_sensitive_file_is_sensitive(worker: WorkerClient, root: Path) -> None:
    (root / ".env").write_text("TOKEN=old\n")
    (root / "notes.txt").symlink_to(".env")
    assert code(await run_tool(worker, "write_file", path="notes.txt", content="x")) == "sensitive_path"
    assert (root / ".env").read_text() == "TOKEN=old\n"


# A symlink (or chain) whose target does not exist yet, and `..` after a symlink: the path acted on, by path.
THROUGH_LINKS = {
    "notes": ".env",
    "chain": ".env",
    "deep": "missing/dir/.env.local",
    "absolute": "id_ed25519",
    "keys/../credentials": ".aws/credentials",
    "known/../config": ".ssh/config",
}


@pytest.fixture
def links(root: Path) -> Path:
    """Symlinks in `root` that lead to sensitive names, none of which exists (.ssh does, empty)."""
    (root / ".ssh").mkdir()
    (root / "notes").symlink_to(".env")
    (root / "chain").symlink_to("notes")
    (root / "deep").symlink_to("missing/dir/.env.local")
    (root / "absolute").symlink_to(root / "id_ed25519")
    (root / "keys").symlink_to(".aws/profile")
    (root / "known").symlink_to(".ssh/known_hosts")
    return root


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
@pytest.mark.parametrize("path", sorted(THROUGH_LINKS))
async def test_a_write_through_a_symlink_is_checked_where_it_would_land(
    worker: WorkerClient, links: Path, path: str, mode: str
) -> None:
    before = sorted(p.relative_to(links) for p in links.rglob("*"))
    reply = await run_tool(worker, "write_file", mode=mode, path=path, content="KEY=1", create_dirs=True)
    assert code(reply) == "sensitive_path"
    assert THROUGH_LINKS[path] in reply["error"]  # the message names where the write would land
    reply = await run_tool(worker, "edit_file", mode=mode, path=path, old_string="K", new_string="x")
    assert code(reply) == "sensitive_path"
    assert sorted(p.relative_to(links) for p in links.rglob("*")) == before
    assert not (links / THROUGH_LINKS[path]).exists()


async def test_a_dangling_symlink_to_an_ordinary_name_is_written_through(
    worker: WorkerClient, root: Path
) -> None:
    (root / "plain-link").symlink_to("plain/made.txt")
    result = ok(await run_tool(worker, "write_file", path="plain-link", content="x", create_dirs=True))
    assert result["metadata"]["created"] is True
    assert (root / "plain" / "made.txt").read_text() == "x"
    assert (root / "plain-link").is_symlink()


@pytest.mark.parametrize("mode", ["standard", "read_only", "unconfined"])
async def test_wuu_credential_files_are_blocked_for_reads_too(spawn: Spawner, root: Path, mode: str) -> None:
    wuu_home = root / "wuu-home"
    wuu_home.mkdir()
    (wuu_home / "auth.json").write_text('{"token": "t"}')
    (wuu_home / "config.toml").write_text("ok = true\n")
    (root / "auth.json").write_text('{"elsewhere": true}')
    client = await spawn(WUU_HOME=str(wuu_home))
    await client.connect(str(root), SESSION)
    assert code(await run_tool(client, "read_file", mode=mode, path="wuu-home/auth.json")) == "sensitive_path"
    assert code(await client.request("export/open", {"path": "wuu-home/auth.json"})) == "sensitive_path"
    assert (
        ok(await run_tool(client, "read_file", mode=mode, path="wuu-home/config.toml"))["output"]
        == "ok = true\n"
    )
    # The same name outside Wuu home is only write-guarded.
    assert (
        ok(await run_tool(client, "read_file", mode=mode, path="auth.json"))["output"]
        == '{"elsewhere": true}'
    )
    # Listing the directory still shows the name.
    listing = ok(await run_tool(client, "list_dir", mode=mode, path="wuu-home"))
    assert listing["output"].splitlines() == ["auth.json", "config.toml"]


@pytest.mark.parametrize("mode", ["standard", "read_only", "unconfined"])
async def test_a_hard_link_to_a_wuu_credential_file_is_refused_as_that_file(
    spawn: Spawner, root: Path, tmp_path: Path, mode: str
) -> None:
    wuu_home = tmp_path / "wuu-home"
    wuu_home.mkdir()
    client = await spawn(WUU_HOME=str(wuu_home))
    await client.connect(str(root), SESSION)
    # Made after the worker started: the files are looked up at each call.
    (wuu_home / "auth.json").write_text('{"token": "t"}')
    (wuu_home / "Remote.JSON").write_text('{"remote": "r"}')  # the rule's names fold ASCII case
    os.link(wuu_home / "auth.json", root / "notes.txt")
    os.link(wuu_home / "Remote.JSON", root / "remote.txt")
    for name in ("notes.txt", "remote.txt"):
        reply = await run_tool(client, "read_file", mode=mode, path=name)
        assert code(reply) == "sensitive_path"
        assert "wuu-credential" in reply["error"]
    assert code(await client.request("export/open", {"path": "notes.txt"})) == "sensitive_path"
    # Listing still shows the name, as it does in Wuu home itself.
    listing = ok(await run_tool(client, "list_dir", mode=mode, path="."))
    assert listing["output"].splitlines() == ["notes.txt", "remote.txt"]
    assert (wuu_home / "auth.json").read_text() == '{"token": "t"}'


async def test_writing_a_hard_link_to_a_wuu_credential_file_is_refused(
    spawn: Spawner, root: Path, tmp_path: Path
) -> None:
    wuu_home = tmp_path / "wuu-home"
    wuu_home.mkdir()
    (wuu_home / "credentials.json").write_text("secret")
    os.link(wuu_home / "credentials.json", root / "plain.txt")
    client = await spawn(WUU_HOME=str(wuu_home))
    await client.connect(str(root), SESSION)
    # The path boundary refuses every write to a file with two links first; unconfined has no boundary.
    reply = await run_tool(client, "write_file", path="plain.txt", content="changed")
    assert code(reply) == "path_outside_root"
    reply = await run_tool(client, "write_file", mode="unconfined", path="plain.txt", content="changed")
    assert code(reply) == "sensitive_path"
    reply = await run_tool(
        client, "edit_file", mode="unconfined", path="plain.txt", old_string="secret", new_string="x"
    )
    assert code(reply) == "sensitive_path"
    assert (wuu_home / "credentials.json").read_text() == "secret"


async def test_a_file_with_a_second_link_elsewhere_stays_readable(
    spawn: Spawner, root: Path, tmp_path: Path
) -> None:
    # Only the files the rules name are recognized by identity: any other hard link reads as before.
    wuu_home = tmp_path / "wuu-home"
    wuu_home.mkdir()
    (wuu_home / "config.toml").write_text("ok = true\n")
    os.link(wuu_home / "config.toml", root / "config.toml")
    client = await spawn(WUU_HOME=str(wuu_home))
    await client.connect(str(root), SESSION)
    assert ok(await run_tool(client, "read_file", path="config.toml"))["output"] == "ok = true\n"
