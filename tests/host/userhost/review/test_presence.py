"""Exclusive presence: while any host of the space runs (in-process, or `wuu-userhost serve`), the command
refuses and writes nothing; once every host has stopped it runs. While the command holds the space, no host
starts."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, until
from tests.host.userhost.review.conftest import (
    PERSONAL,
    SPACE,
    content,
    digest_of,
    files_in,
    inspect,
    make_ledger,
    refused,
    wuu,
)
from wuu.host.userhost import UserHost
from wuu.host.userhost.personal import personal
from wuu.host.userhost.review import PresenceHeld, PresenceLock

RUNNING = "a user host is running for user space 'local'"


async def start_host(home: Path) -> UserHost:
    return await UserHost.start(
        user_space_id=SPACE, product_domain="personal", home=home, compose=[personal()]
    )


async def test_a_running_host_makes_the_command_refuse_until_it_closes(home: Path, state: Path) -> None:
    first = await start_host(home)
    second = await start_host(home)  # hosts share the space's presence
    make_ledger(state)  # written while the hosts run (a host refuses to start with an unmigrated ledger)
    digest = digest_of(content())
    try:
        before = files_in(state)
        refused(await asyncio.to_thread(wuu, home, *PERSONAL), RUNNING, "stop every Personal host")
        apply = ("--apply", "--expect-source-digest", digest)
        refused(await asyncio.to_thread(wuu, home, *PERSONAL, *apply), RUNNING)
        await first.close()
        refused(await asyncio.to_thread(wuu, home, *PERSONAL), RUNNING)
        assert files_in(state) == before
    finally:
        await first.close()
        await second.close()
    assert (await asyncio.to_thread(inspect, home))["status"] == "migration-required"


async def test_a_serving_host_makes_the_command_refuse_until_it_stops(
    home: Path, state: Path, run_dir: Path
) -> None:
    socket = run_dir / "userhost.sock"
    command = [str(Path(sys.executable).parent / "wuu-userhost"), "serve", "--user-space", SPACE]
    process = await asyncio.create_subprocess_exec(
        *command,
        *["--product-domain", "personal", "--composition-profile", "personal", "--home", str(home)],
        *["--listen", f"unix:{socket}"],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await until(socket.exists, "the host's socket")
        make_ledger(state)
        refused(await asyncio.to_thread(wuu, home, *PERSONAL), RUNNING)
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    assert (await asyncio.to_thread(inspect, home))["status"] == "migration-required"


async def test_no_host_starts_while_the_command_holds_the_space(home: Path, state: Path) -> None:
    with PresenceLock.acquire(state, exclusive=True):
        with pytest.raises(PresenceHeld, match="a maintenance command"):
            await start_host(home)
        assert sorted(path.name for path in state.iterdir()) == []  # the refused host opened no store
    host = await start_host(home)
    await host.close()
