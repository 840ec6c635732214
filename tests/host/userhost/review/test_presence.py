"""Exclusive presence: while a host of the space runs (in-process, or `wuu-userhost serve`), the command
refuses naming it and writes nothing; once the host has stopped it runs. While the command holds the space,
no host starts (`user_host_already_running`) and no other migration runs."""

from __future__ import annotations

import asyncio
import os
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
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UserHost, UserHostStartError
from wuu.host.userhost.personal import personal
from wuu.host.userhost.storage import PresenceLock

IN_USE = "user space 'local' is in use"


async def start_host(home: Path) -> UserHost:
    return await UserHost.start(
        user_space_id=SPACE, product_domain="personal", home=home, compose=[personal()]
    )


async def test_a_running_host_makes_the_command_refuse_until_it_closes(home: Path, state: Path) -> None:
    host = await start_host(home)
    make_ledger(state)  # written while the host runs (a host refuses to start with an unmigrated ledger)
    digest = digest_of(content())
    try:
        before = files_in(state)
        named = f"a running user host (pid {os.getpid()}"
        refused(await asyncio.to_thread(wuu, home, *PERSONAL), IN_USE, named, "stop every Personal host")
        apply = ("--apply", "--expect-source-digest", digest)
        refused(await asyncio.to_thread(wuu, home, *PERSONAL, *apply), IN_USE, named)
        assert files_in(state) == before
    finally:
        await host.close()
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
        named = f"a running user host (pid {process.pid}; transports: unix:{socket})"
        refused(await asyncio.to_thread(wuu, home, *PERSONAL), IN_USE, named)
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    assert (await asyncio.to_thread(inspect, home))["status"] == "migration-required"


async def test_no_host_starts_and_no_other_migration_runs_while_the_command_holds_the_space(
    home: Path, state: Path
) -> None:
    make_ledger(state)
    before = files_in(home)
    with PresenceLock.acquire(state):  # what the command holds while it runs
        with pytest.raises(UserHostStartError) as raised:
            await start_host(home)
        assert raised.value.code is UserHostErrorCode.USER_HOST_ALREADY_RUNNING
        assert "a maintenance command such as `wuu state migrate-personal-review`" in raised.value.message
        refused(await asyncio.to_thread(wuu, home, *PERSONAL), IN_USE, "another process")
        assert files_in(home) == before  # the refused host opened no store, and wrote no record
    assert (await asyncio.to_thread(inspect, home))["status"] == "migration-required"
