"""The mutant's process: the reference user host served in-process, each client connection through a relay.

It takes the arguments of `wuu-userhost serve` (its own argument parser) and behaves as that command does
(apart from the mutant's rule): it starts the host (with the mutant's startup override in place of
`UserHost.start`, when it has one), composes the profile (the mutant's composition override in place of the
reference Personal composition, when it has one), serves `--stdio` and `--listen unix:PATH`
and runs until SIGTERM or SIGINT, or, with `--stdio` alone, until that client has gone and the host is idle.
Each client connection gets its own `NdjsonConnection` of the host on one end of a socket pair, and the
mutant's relay between the client and the other end. gRPC is not served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import IO, Any

from wuu.host.userhost.authority import Composer, UserHost
from wuu.host.userhost.cli import JsonLines, parser
from wuu.host.userhost.envelope import FRAMING
from wuu.host.userhost.errors import UserHostStartError
from wuu.host.userhost.ndjson import NdjsonConnection
from wuu.host.userhost.personal import StoreError, StoreVersionError, personal
from wuu.host.userhost.unix import SocketInUse, prepare_socket_path
from wuu.worker.streams import connect_pipes

from . import Mutant
from .harness import READ_BUFFER, Hub, Relay


class UsageError(Exception):
    """A flag is wrong; the message names it."""


class MutantHost:
    """The in-process host and the relays of its client connections."""

    def __init__(self, host: UserHost, relay: type[Relay]) -> None:
        self.host = host
        self.hub = Hub()
        self._relay = relay
        self._connections: set[asyncio.Task[None]] = set()

    async def serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, transport: str
    ) -> None:
        """Serve one client connection through a fresh relay, until the host's side has closed."""
        ours, theirs = socket.socketpair()
        from_host, to_host = await asyncio.open_unix_connection(sock=ours, limit=READ_BUFFER)
        host_reader, host_writer = await asyncio.open_unix_connection(sock=theirs, limit=FRAMING.stream_limit)
        serving = asyncio.create_task(
            NdjsonConnection(self.host, host_reader, host_writer, transport).serve()
        )
        try:
            await self._relay(self.hub, transport).run((reader, writer), (from_host, to_host))
        finally:
            await asyncio.gather(serving, return_exceptions=True)

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self.serve_client(reader, writer, "unix")
        finally:
            self._connections.discard(task)

    async def stdio(self, *, alone: bool) -> None:
        """Serve the stdio client; when it is the only transport, return once it has gone and the host is idle."""
        reader, writer, _ = await connect_pipes(output_file=_own_stdout(), limit=READ_BUFFER)
        await self.serve_client(reader, writer, "stdio")
        if not alone:
            await asyncio.Event().wait()  # the socket keeps the host up until a signal
        await self.host.wait_idle()

    async def close(self) -> None:
        """End every connection."""
        for relay in list(self.hub.relays):
            relay.end()
        await asyncio.gather(*self._connections, return_exceptions=True)


def _own_stdout() -> IO[bytes]:
    """This process's stdout as a file whose close really closes the client's pipe (fd 1 goes to /dev/null),
    as the reference host's stdio transport has it."""
    sys.stdout.flush()
    output = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return output


def _modules(mutant: Mutant, profile: str | None) -> list[Composer]:
    if profile is None:
        return []
    if profile != "personal":
        raise UsageError(
            f"--composition-profile: no profile {profile!r} in this installation (available: personal)"
        )
    return [mutant.compose() if mutant.compose is not None else personal()]


def _home(given: str | None) -> Path:
    home = Path(given or os.environ.get("WUU_HOME") or Path("~/.wuu").expanduser())
    if not home.is_absolute():
        raise UsageError(f"--home: {home} is not an absolute path")
    return home


async def serve(mutant: Mutant, argv: list[str]) -> int:
    """Serve the mutant as `wuu-userhost serve ARGV` would serve the reference host."""
    args = parser().parse_args(["serve", *argv])
    if args.grpc:
        raise UsageError("--grpc: a mutant serves no gRPC")
    if not (args.stdio or args.listen):
        raise UsageError("give at least one transport: --stdio or --listen unix:PATH")
    if args.listen and (not args.listen.startswith("unix:") or not Path(args.listen[5:]).is_absolute()):
        raise UsageError(f"--listen: {args.listen!r} is not unix:PATH with an absolute path")
    start = mutant.startup.start if mutant.startup is not None else UserHost.start
    host = await start(
        user_space_id=args.user_space,
        product_domain=args.product_domain,
        home=_home(args.home),
        composition_profile=args.composition_profile,
        isolation=args.isolation,
        compose=_modules(mutant, args.composition_profile),
    )
    served = MutantHost(host, mutant.relay or Relay)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    listener: asyncio.Server | None = None
    path = Path(args.listen[5:]) if args.listen else None
    try:
        if path is not None:
            try:
                await prepare_socket_path(path)
            except SocketInUse as error:
                raise UsageError(f"--listen: {error}") from None
            listener = await asyncio.start_unix_server(served.accept, path=str(path), limit=READ_BUFFER)
            os.chmod(path, 0o600)
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
        if args.stdio:
            waits.append(asyncio.create_task(served.stdio(alone=listener is None)))
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        for task in done:
            task.result()
    finally:
        if listener is not None:
            listener.close()
        await served.close()
        if listener is not None:
            await listener.wait_closed()
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        await host.close()
    return 0


def main(mutant: Mutant, argv: list[str]) -> int:
    """Run the mutant host; the exit status of `wuu-userhost serve` (2 when it cannot start)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    try:
        return asyncio.run(serve(mutant, argv))
    except (UsageError, UserHostStartError, StoreError, StoreVersionError) as error:
        print(f"mutant {mutant.name}: {error}", file=sys.stderr)
        return 2
