"""A user host with short deadlines and few descriptors, as a process, for the slot campaigns (`slots.py`):

    python -m tools.chaos.squatted_host HOME SOCKET

It serves the binding `local`/`personal` (no composition) on the Unix socket SOCKET, and on HTTP and gRPC
at free ports of 127.0.0.1 (the space's token file authenticates), with the initialize and head deadlines of
DEADLINE_S, the idle timeout IDLE_S and at most NOFILE descriptors, so that a campaign reaches each bound in
a fraction of a second. Once all listen it prints `HTTP-ADDRESS GRPC-ADDRESS` as one line on stdout, and it
runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
from pathlib import Path

from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.address import HttpAddress
from wuu.host.userhost.grpc_service import GrpcServer
from wuu.host.userhost.http import HttpServer
from wuu.host.userhost.tokens import TokenStore

DEADLINE_S = 0.5
"""The initialize deadline (socket) and the head deadline (HTTP)."""
IDLE_S = 1.0
"""How long an HTTP token's transport lives idle."""
NOFILE = 256
"""The host's descriptor limit: a flood of connections reaches it."""


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("home", type=Path)
    parser.add_argument("socket", type=Path)
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    host = await UserHost.start(user_space_id="local", product_domain="personal", home=args.home)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    unix = await UnixServer.start(host, args.socket, initialize_timeout=DEADLINE_S)
    tokens = TokenStore.of_space(args.home, "local", "personal")
    http = await HttpServer.start(
        host, HttpAddress("127.0.0.1", 0), tokens, head_timeout=DEADLINE_S, idle_timeout=IDLE_S
    )
    grpc = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens, idle_timeout=IDLE_S)
    print(http.address, grpc.address.target, flush=True)
    try:
        await stop.wait()
    finally:
        await grpc.close()
        await http.close()
        await unix.close()
        await host.close()


if __name__ == "__main__":
    asyncio.run(main())
