"""`make dev` (`python -m tools.dev`) as a real process: it serves the demo space's Personal host, prints how to
connect (the socket a client reaches, a token command that works), stops cleanly on SIGINT, keeps the data of a
given WUU_HOME and removes a throw-away home; a relative WUU_HOME is refused."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import DEADLINE, ROOT
from wuu.host.userhost.client import UserHostClient


async def serve_and_stop(env: dict[str, str]) -> tuple[Path, Path]:
    """Run the command, check what it prints against a client and the token command, stop it with SIGINT;
    the home and socket it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.dev",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    try:
        printed = ""
        while "Ctrl-C" not in printed:
            line = await asyncio.wait_for(process.stdout.readline(), DEADLINE)
            assert line, f"the command ended with {await process.wait()} before it printed how to connect"
            printed += line.decode()
        home = Path(re.search(r"home:\s+(\S+)", printed)[1])  # type: ignore[index]
        socket = Path(re.search(r"socket:\s+(\S+)", printed)[1])  # type: ignore[index]
        token = re.search(r"^\s+(\S+wuu-userhost token create .*)$", printed, re.M)[1]  # type: ignore[index]
        client = await UserHostClient.connect_unix(socket)
        try:
            init = await client.initialize()
            assert (init.user_space_id, init.product_domain) == ("demo", "personal")
            assert [plugin.plugin_id for plugin in init.plugins] == ["wuu.personal"]
        finally:
            await client.close()
        created = subprocess.run(shlex.split(token), capture_output=True, text=True, timeout=DEADLINE)
        assert created.returncode == 0 and created.stdout.strip(), created.stderr
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not socket.exists()
    return home, socket


async def test_a_given_home_keeps_the_demo_space(tmp_path: Path) -> None:
    home, _ = await serve_and_stop({**os.environ, "WUU_HOME": str(tmp_path / "home")})
    assert home == tmp_path / "home"
    assert (home / "user-spaces" / "demo" / "personal" / "state" / "personal.sqlite").is_file()


async def test_without_a_home_a_throwaway_one_is_removed() -> None:
    environment = {name: value for name, value in os.environ.items() if name != "WUU_HOME"}
    home, _ = await serve_and_stop(environment)
    assert not home.exists()


def test_a_relative_home_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.dev"],
        cwd=ROOT,
        env={**os.environ, "WUU_HOME": "relative"},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 2 and "WUU_HOME" in done.stderr, done.stderr
