"""The token store (host/userhost/tokens.py) under concurrent commands: dozens of `wuu-userhost token` processes
against one file and a running HTTP host, the store's lock, change detection on the host's side, and a token
whose `--out` file was refused."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import random
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tools.chaos import token_races
from wuu.host.userhost.cli import main
from wuu.host.userhost.tokens import TOKENS_FILE, TokenError, TokenStore, digest

DEADLINE = 30.0
INITIALIZE = {"protocol_version": 1, "client_info": {"name": "test", "version": "1"}}


@pytest.fixture
async def http_host(home: Path) -> AsyncIterator[str]:
    """`wuu-userhost serve --http 127.0.0.1:0` of the raced space, in its own process; its address."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "wuu.host.userhost", "serve", *token_races.binding(home)),
        *("--http", "127.0.0.1:0"),
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(DEADLINE):
            while True:
                line = await process.stderr.readline()
                assert line, "the host ended before it listened"
                logged = json.loads(line)
                if logged["message"] == "listening" and logged.get("transport") == "http":
                    break
        yield logged["address"]
    finally:
        process.terminate()
        assert await process.wait() == 0


async def initialize(web: aiohttp.ClientSession, address: str, token: str) -> int:
    """The status of `initialize` with this token; an accepted token is detached again (`shutdown`), so that
    dozens of tokens fit in the host's 16 client transports."""
    headers = {"Authorization": f"Bearer {token}"}
    async with web.post(f"http://{address}/v1/rpc/initialize", json=INITIALIZE, headers=headers) as reply:
        status = reply.status
    if status == 200:
        async with web.post(f"http://{address}/v1/rpc/shutdown", json={}, headers=headers) as reply:
            assert reply.status == 200
    return status


async def test_dozens_of_concurrent_creates_and_revokes_lose_no_change(home: Path, http_host: str) -> None:
    """40 creates of distinct names, a third of them revoked again at once, and revocations of earlier tokens,
    each in its own process and all released together while a host serves the file: every printed token
    that was not revoked is accepted by the host, every revoked one is refused, and the file names exactly
    the live tokens."""
    store = token_races.store_of(home)
    earlier = {f"earlier-{number}": store.create(f"earlier-{number}") for number in range(10)}
    after = await token_races.play(home, random.Random(22), earlier, creates=40, label="new")
    assert {name.split("-")[0] for name in after.live} == {"earlier", "new"}
    assert {name.split("-")[0] for name in after.revoked} == {"earlier", "new"}
    async with aiohttp.ClientSession() as web:
        refused = [
            name for name, token in after.live.items() if await initialize(web, http_host, token) != 200
        ]
        accepted = [
            name for name, token in after.revoked.items() if await initialize(web, http_host, token) != 401
        ]
    assert (refused, accepted, after.failures) == ([], [], [])
    assert sorted(entry.name for entry in store.entries()) == sorted(after.live)
    assert token_races.check_store(store, after) == []


def test_a_change_that_keeps_the_files_inode_time_and_size_is_seen(tmp_path: Path) -> None:
    """Two replacements within one timestamp tick can leave a file with the inode the first one freed, the
    same modification time and the same size; the host's store sees the change all the same."""
    store = TokenStore(tmp_path / TOKENS_FILE)
    first = store.create("aa")
    served = TokenStore(store.path)
    assert served.refresh() is True
    assert served.authenticate(first) is not None
    was = store.path.stat()
    kept = tmp_path / "kept"
    os.link(store.path, kept)  # holds the first file's inode for the forged replacement
    store.revoke("aa")
    second = store.create("bb")
    content = store.path.read_bytes()
    assert len(content) == was.st_size
    with kept.open("r+b") as file:
        file.write(content)
    os.utime(kept, ns=(was.st_atime_ns, was.st_mtime_ns))
    os.replace(kept, store.path)
    now = store.path.stat()
    assert (now.st_ino, now.st_mtime_ns, now.st_size) == (was.st_ino, was.st_mtime_ns, was.st_size)
    assert served.refresh() is True
    assert served.authenticate(first) is None
    entry = served.authenticate(second)
    assert entry is not None and entry.name == "bb"
    assert served.refresh() is False


def test_a_command_waits_for_the_lock_a_bounded_time_and_names_it(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "state" / TOKENS_FILE, lock_seconds=0.3)
    store.create("phone")
    assert stat.S_IMODE(store.lock_path.stat().st_mode) == 0o600
    content = store.path.read_bytes()
    holder = os.open(store.lock_path, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another command in the middle of its change
        started = time.monotonic()
        with pytest.raises(TokenError, match=f"^{store.lock_path}: held by another token command"):
            store.create("desk")
        with pytest.raises(TokenError, match=f"^{store.lock_path}: held by another token command"):
            store.revoke("phone")
        assert time.monotonic() - started >= 0.6
        assert store.path.read_bytes() == content
    finally:
        os.close(holder)
    store.create("desk")
    assert [entry.name for entry in store.entries()] == ["phone", "desk"]


def test_a_refused_out_file_leaves_no_token_and_only_that_token_is_withdrawn(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    binding = token_races.binding(home)
    assert main(["token", "create", "--name", "phone", "--out", str(taken), *binding]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.startswith("wuu-userhost: --out: ")
    assert taken.read_text() == "mine\n"
    store = token_races.store_of(home)
    assert store.entries() == []
    # The name may be revoked and given to another token before a withdrawal: the other token stays.
    old = store.create("phone")
    store.revoke("phone")
    new = store.create("phone")
    store.withdraw(old)
    assert [(entry.name, entry.sha256) for entry in store.entries()] == [("phone", digest(new))]


def test_a_host_out_of_descriptors_still_authenticates_and_still_sees_a_revocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unchanged file is not read at all; a changed one is read with the descriptor the store keeps in
    reserve; and when even that fails, every token is refused (a revocation never waits)."""
    store = TokenStore(tmp_path / TOKENS_FILE)
    token = store.create("phone")
    served = TokenStore(store.path)
    served.keep_spare()
    assert served.refresh() is True
    reads: list[Path] = []
    real_read = Path.read_bytes

    def out_of_descriptors(self: Path) -> bytes:
        """Fails as a process without free descriptors does, until the spare one is given back."""
        if served._spare is not None:
            reads.append(self)
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(self))
        return real_read(self)

    with monkeypatch.context() as short:
        short.setattr(Path, "read_bytes", out_of_descriptors)
        assert served.refresh() is False and reads == []  # unchanged: nothing read
        assert served.authenticate(token) is not None
    store.revoke("phone")
    with monkeypatch.context() as short:
        short.setattr(Path, "read_bytes", out_of_descriptors)
        assert served.refresh() is True  # read with the spare descriptor
        assert served.authenticate(token) is None
    assert served._spare is not None  # taken back after the read

    again = store.create("desk")
    with monkeypatch.context() as short:
        short.setattr(Path, "read_bytes", lambda self: (_ for _ in ()).throw(OSError(errno.EMFILE, "none")))
        with pytest.raises(TokenError, match="cannot be read"):
            served.refresh()
        assert served.authenticate(again) is None  # refused while the file cannot be read
    assert served.refresh() is True and served.authenticate(again) is not None
    served.close_spare()
