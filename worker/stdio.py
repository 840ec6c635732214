"""Whether a stream can carry a protocol: the event loop watches only pipes, sockets and terminals.

Asyncio accepts any character device but cannot watch most of them (`/dev/null`), and never a regular
file: on such a stream a command fails inside its loop, or waits forever. The commands that speak on
stdio check it first; this module imports nothing else, so that a relay's start-up stays light.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import IO


class UnusableStream(ValueError):
    """A stream the protocol cannot run on: the event loop can watch only pipes, sockets and terminals."""


def check_stream(file: IO[bytes], name: str) -> None:
    """UnusableStream, naming `name`, its path and what it is, unless `file` is a pipe, a socket or a terminal."""
    fd = file.fileno()
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd)):
        return
    what = "a regular file" if stat.S_ISREG(mode) else "a device" if stat.S_ISCHR(mode) else "not a stream"
    try:
        where = f" ({os.readlink(f'/proc/self/fd/{fd}')})"
    except OSError:
        where = ""
    raise UnusableStream(f"{name}{where} is {what}, not a pipe, socket or terminal")


def stdio_problem() -> str | None:
    """Why this process's stdin or stdout cannot carry the protocol, or None: for a command line to say
    before it starts anything."""
    try:
        check_stream(sys.stdin.buffer, "stdin")
        check_stream(sys.stdout.buffer, "stdout")
    except UnusableStream as error:
        return str(error)
    return None
