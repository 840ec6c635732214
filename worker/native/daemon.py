"""A persistent native worker: one worker that outlives its connections (`persistent` in
spec/schema/config/execution_environments.schema.json).

`serve_socket` runs one NativeWorker behind a Unix socket. Each connection is a protocol connection
of its own (its own token) and re-initializes with the same binding; the processes, their records and
their retained output stay, so a later connection resumes reads where the host stopped. The worker
exits, cleaning up fully, once it has had no connection for its lifetime.

`attach` is what a backend runs in the environment: it relays its stdio to the socket, starting the
persistent worker first when none answers there (unless another process starts it: `--no-start`). It is
on every connection's path, so it is a plain byte relay that imports nothing of the worker or the protocol
(the worker behind the socket judges every frame itself): the worker's own modules load in `serve_socket`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

START_DEADLINE_S = 10.0
START_POLL_S = 0.02
_CHUNK = 1 << 20


async def serve_socket(path: Path, lifetime_s: float, new_environment: bool = False) -> None:
    """Serve connections on `path` until no connection has been open for `lifetime_s` seconds. In a
    `new_environment` the worker refuses to bind a workspace that must exist already (NativeWorker)."""
    from ..frame_reader import FrameReader
    from ..run import serve
    from .worker import NativeWorker

    worker = NativeWorker(new_environment=new_environment)
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

    loop = asyncio.get_running_loop()
    # The socket is created 0600, never for a moment open to other users (chmod after bind would leave a
    # window under a permissive umask); the umask is this process's, so it is restored before any command.
    umask = os.umask(0o177)
    try:
        server = await loop.create_unix_server(
            lambda: asyncio.StreamReaderProtocol(FrameReader(), connection), path=str(path)
        )
    finally:
        os.umask(umask)
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


def supervise(path: Path, lifetime_s: float, new_environment: bool = False) -> int:
    """`serve`: run `serve_socket` in a child process and outlive it, so that the commands of a worker that
    was killed (it cannot stop them itself) are ended too (`wuu.worker.orphans`); the worker's exit status
    (128 + the signal that killed it). Where there is no subreaper, the worker runs in this process."""
    import signal

    from ..orphans import ORPHANS_S, adopt_orphans, end_orphans_now

    if not adopt_orphans():
        asyncio.run(serve_socket(path, lifetime_s, new_environment))
        return 0
    child = os.fork()
    if child == 0:
        code = 1
        try:
            adopt_orphans()  # the worker is the subreaper of its commands (trees.py); fork does not pass it on
            asyncio.run(serve_socket(path, lifetime_s, new_environment))
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    # A signal for the worker is passed on; the supervisor itself ends only after it.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, _: os.kill(child, received))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    end_orphans_now(ORPHANS_S)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _start_daemon(path: Path, lifetime_s: float, new_environment: bool) -> None:
    """Start `serve` detached from this process (its own session), logging next to its socket."""
    log = os.fdopen(os.open(path.with_suffix(".log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    options = ["--socket", str(path), "--lifetime-seconds", str(lifetime_s)]
    if new_environment:
        options.append("--new-environment")
    subprocess.Popen(
        [sys.executable, "-m", "wuu.worker", "serve", *options],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    log.close()


async def _connect(
    path: Path, lifetime_s: float, start: bool, new_environment: bool
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if start:
        try:
            return await asyncio.open_unix_connection(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a socket left by a worker that is gone
        _start_daemon(path, lifetime_s, new_environment)
    deadline = asyncio.get_running_loop().time() + START_DEADLINE_S
    while True:
        try:
            return await asyncio.open_unix_connection(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(START_POLL_S)


async def _stdio() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """This process's stdin and stdout as asyncio streams."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, half_close: bool) -> None:
    """Copy bytes as they come until `reader`'s EOF or a broken stream; then half-close `writer` if asked."""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if half_close and writer.can_write_eof():
            writer.write_eof()


async def attach(path: Path, lifetime_s: float, *, start: bool = True, new_environment: bool = False) -> int:
    """Relay this process's stdio to the persistent worker at `path`; 0 when the connection ended cleanly.

    With `start`, a worker is started when none answers there (`new_environment` is passed on to it).
    Without it, another process starts the worker (the ssh backend's launcher, under its locks), and the
    relay only waits for the worker's socket: its own start-up then overlaps the worker's."""
    try:
        socket_reader, socket_writer = await _connect(path, lifetime_s, start, new_environment)
    except OSError as error:
        print(f"wuu-worker attach: no worker at {path}: {error}", file=sys.stderr)
        return 1
    stdin, stdout = await _stdio()
    # The host's EOF half-closes the socket, so the worker detaches this connection and then closes it;
    # the relay ends with the worker's side.
    async with asyncio.TaskGroup() as relay:
        to_worker = relay.create_task(_pump(stdin, socket_writer, half_close=True))
        await _pump(socket_reader, stdout, half_close=False)
        to_worker.cancel()
    socket_writer.close()
    stdout.close()
    return 0
