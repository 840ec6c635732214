"""A Personal host whose main agent takes no action, serving a Unix socket until SIGTERM:

    python tools/bench/personal_host.py HOME SOCKET

It is `wuu-userhost serve --composition-profile personal` through the embedding API, on the same event loop,
less the agent's work: its steps read their window and take no action. The send figures measure admission
(a durable receipt per input), not the stand-in agent's answers, which cost writes of their own and are
measured beside them with the real command.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.event_loop import run
from wuu.host.userhost.personal import AgentStep, personal


class IdleAgent:
    """Takes no step: admitted inputs wait, unread."""

    async def step(self, step: AgentStep) -> None:
        return None


async def main(home: Path, socket: Path) -> None:
    host = await UserHost.start(
        user_space_id="bench",
        product_domain="personal",
        home=home,
        composition_profile="personal",
        compose=[personal(agent=IdleAgent())],
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await UnixServer.start(host, socket)
    await stop.wait()
    await server.close()
    await host.close()


if __name__ == "__main__":
    run(lambda: main(Path(sys.argv[1]), Path(sys.argv[2])))
