"""A persistent native worker: one worker that outlives its connections (`persistent` in
spec/schema/config/execution_environments.schema.json).

`serve_socket` runs one NativeWorker behind a Unix socket. Each connection is a protocol connection
of its own (its own token) and re-initializes with the same binding; the processes, their records and
their retained output stay, so a later connection resumes reads where the host stopped. The worker
exits, cleaning up fully, once it has had no connection for its lifetime.

`attach` is what a backend runs in the environment: it relays its stdio to the socket, starting the
persistent worker first when none answers there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

from ..framing import reader_limit
from ..relay import Relay
from ..run import serve
from ..streams import connect_pipes
from .worker import NativeWorker

START_DEADLINE_S = 10.0
START_POLL_S = 0.02


async def serve_socket(path: Path, lifetime_s: float) -> None:
    """Serve connections on `path` until no connection has been open for `lifetime_s` seconds."""
    worker = NativeWorker()
    active = 0
    activity = asyncio.Event()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal active
        active += 1
        activity.set()
        try:
            await serve(worker.backend(persistent=True), reader, writer)
        finally:
            active -= 1
            activity.set()

    server = await asyncio.start_unix_server(connection, path=str(path), limit=reader_limit())
    os.chmod(path, 0o600)
    try:
        while True:
            activity.clear()
            if active:
                await activity.wait()
                continue
            try:
                await asyncio.wait_for(activity.wait(), lifetime_s)
            except TimeoutError:
                if not active:
                    break
    finally:
        server.close()
        await server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        await worker.close()


def _start_daemon(path: Path, lifetime_s: float) -> None:
    """Start `serve` detached from this process (its own session), logging next to its socket."""
    log = path.with_suffix(".log").open("ab")
    subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wuu.worker",
            "serve",
            "--socket",
            str(path),
            "--lifetime-seconds",
            str(lifetime_s),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    log.close()


async def _connect(path: Path, lifetime_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_unix_connection(str(path), limit=reader_limit())
    except (FileNotFoundError, ConnectionRefusedError):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket left by a worker that is gone
    _start_daemon(path, lifetime_s)
    deadline = asyncio.get_running_loop().time() + START_DEADLINE_S
    while True:
        try:
            return await asyncio.open_unix_connection(str(path), limit=reader_limit())
        except (FileNotFoundError, ConnectionRefusedError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(START_POLL_S)


async def attach(path: Path, lifetime_s: float) -> int:
    """Relay this process's stdio to the persistent worker at `path`; 0 when the connection ended cleanly."""
    try:
        socket_reader, socket_writer = await _connect(path, lifetime_s)
    except OSError as error:
        print(f"wuu-worker attach: no worker at {path}: {error}", file=sys.stderr)
        return 1
    stdin, stdout, _ = await connect_pipes()
    # The host's EOF half-closes the socket, so the worker detaches this connection and then closes it.
    relay = Relay((stdin, stdout), (socket_reader, socket_writer))
    await relay.finish()
    stdout.close()
    return 0
