"""A spawned child on the event loop: its combined output read, its stdin written, its exit watched.

This is the part of asyncio's subprocess transport that the worker uses, over pipes the worker creates itself,
so that the child can be started by any `Spawner` (asyncio's transport insists on calling `Popen` on the loop's
thread). The exit is watched through a pidfd where the kernel has one (Linux 5.3), else by a thread that waits.
The protocol gets the calls asyncio would make: `pipe_data_received(1, data)`, `pipe_connection_lost(1 or 0,
None)`, `process_exited()`, and `pause_writing`/`resume_writing` for stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from .spawner import Spawner

# As much as asyncio's pipe transports read per wake-up.
READ_BYTES = 256 * 1024
"""The most bytes one read of a child's output pipe takes."""

P = TypeVar("P", bound=asyncio.SubprocessProtocol)


class ChildTransport:
    """One child's pipes and exit, delivered to an `asyncio.SubprocessProtocol`."""

    def __init__(
        self, child: subprocess.Popen[bytes], protocol: asyncio.SubprocessProtocol, output: int
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._child = child
        self._protocol = protocol
        self._output: int | None = output
        self._stdin: asyncio.WriteTransport | None = None
        os.set_blocking(output, False)
        self._loop.add_reader(output, self._read)
        self._output_paused = False
        self._watch_exit()
        protocol.connection_made(self)  # type: ignore[arg-type]  # a transport in all but its base class

    def get_pid(self) -> int:
        """The child's pid (its process group id too: it leads a session of its own)."""
        return self._child.pid

    def get_returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal), else None."""
        return self._child.returncode

    def get_pipe_transport(self, fd: int) -> asyncio.WriteTransport | None:
        """The stdin transport for fd 0 (None without stdin); the output is not a transport here."""
        return self._stdin if fd == 0 else None

    def pause_output(self) -> None:
        """Stop reading the output pipe: the child blocks once the pipe is full."""
        if self._output is not None and not self._output_paused:
            self._loop.remove_reader(self._output)
            self._output_paused = True

    def resume_output(self) -> None:
        """Read the output pipe again."""
        if self._output is not None and self._output_paused:
            self._loop.add_reader(self._output, self._read)
            self._output_paused = False

    def close(self) -> None:
        """Stop reading the output and close stdin. The exit is still watched, so the child is reaped."""
        self._end_output()
        if self._stdin is not None:
            self._stdin.close()

    async def connect_stdin(self, fd: int) -> None:
        """Take the write end of the child's stdin pipe, with flow control reported to the protocol."""
        pipe = os.fdopen(fd, "wb", buffering=0)
        self._stdin, _ = await self._loop.connect_write_pipe(lambda: _StdinProtocol(self._protocol), pipe)

    def _read(self) -> None:
        assert self._output is not None
        try:
            data = os.read(self._output, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self._protocol.pipe_data_received(1, data)
        else:
            self._end_output()

    def _end_output(self) -> None:
        if self._output is None:
            return
        if not self._output_paused:
            self._loop.remove_reader(self._output)
        os.close(self._output)
        self._output = None
        self._protocol.pipe_connection_lost(1, None)

    def _watch_exit(self) -> None:
        try:
            pidfd = os.pidfd_open(self._child.pid)
        except (AttributeError, OSError):
            # No pidfds: a thread waits instead (the child is ours, so nothing else reaps it).
            def wait() -> None:
                self._child.wait()
                with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is gone
                    self._loop.call_soon_threadsafe(self._protocol.process_exited)

            threading.Thread(target=wait, name="wuu-child-wait", daemon=True).start()
            return

        def exited() -> None:
            self._loop.remove_reader(pidfd)
            os.close(pidfd)
            self._child.wait()  # readable pidfd: it has exited, so this reaps without blocking
            self._protocol.process_exited()

        self._loop.add_reader(pidfd, exited)


class _StdinProtocol(asyncio.BaseProtocol):
    """Passes stdin's flow control and its end on to the child's protocol."""

    def __init__(self, child: asyncio.SubprocessProtocol) -> None:
        self._child = child

    def pause_writing(self) -> None:
        self._child.pause_writing()

    def resume_writing(self) -> None:
        self._child.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._child.pipe_connection_lost(0, exc)


async def spawn(
    spawner: Spawner,
    protocol: Callable[[], P],
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: bool,
    pass_fds: tuple[int, ...] = (),
) -> tuple[ChildTransport, P]:
    """Start `argv` in a session of its own, stdout and stderr on one pipe, stdin a pipe or /dev/null, and
    `pass_fds` open in the child under their numbers.

    Raises OSError or SubprocessError when the program cannot be started (nothing is left open then).
    """
    output, output_end = os.pipe()
    input_end, writer = os.pipe() if stdin else (subprocess.DEVNULL, -1)
    try:
        child = await spawner.popen(
            argv,
            stdin=input_end,
            stdout=output_end,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            pass_fds=pass_fds,
            # A session of its own, hence a process group of its own (pgid = pid) that signals reach as a
            # whole, and no way to take over the worker's controlling terminal.
            start_new_session=True,
        )
    except BaseException:
        for fd in (output, writer):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        # The child's ends: its copies are its own now, and the output pipe must end when the child's do.
        os.close(output_end)
        if stdin:
            os.close(input_end)
    handler = protocol()
    transport = ChildTransport(child, handler, output)
    if stdin:
        try:
            await transport.connect_stdin(writer)
        except BaseException:
            # Cancelled while connecting: the child must not outlive its request.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            transport.close()
            raise
    return transport, handler


async def despite_cancellation(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end even when the calling task is cancelled again meanwhile."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            await asyncio.shield(task)
            return
        except asyncio.CancelledError:
            if task.done():
                raise
            # Another cancel of a task that is already ending: it ends once `work` has.
