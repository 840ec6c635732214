"""The event loop a user host serves on: uvloop's where it is installed, else asyncio's own.

uvloop runs the same asyncio code on libuv; the host spends about a tenth less CPU per request on it
(`make bench`, durable sends from 16 clients). Both loops run the same host: `asyncio` stays selectable
for a platform without uvloop, or to rule the loop out when chasing a fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

KINDS = ("auto", "uvloop", "asyncio")
"""The loops one can ask for: `auto` is uvloop's when it can be imported, else asyncio's."""


class LoopUnavailable(Exception):
    """The loop asked for cannot run here; the message says why."""


def loop_factory(kind: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes a loop of `kind` (None: asyncio's default); LoopUnavailable for `uvloop` without it."""
    if kind not in KINDS:
        raise LoopUnavailable(f"no event loop {kind!r}: one of {', '.join(KINDS)}")
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as error:
        if kind == "uvloop":
            raise LoopUnavailable(f"uvloop cannot be imported ({error})") from None
        return None
    new_event_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new_event_loop


def run(main: Callable[[], Coroutine[Any, Any, T]], kind: str = "auto") -> T:
    """Run `main()` to its end on a new loop of `kind` (as `asyncio.run`); LoopUnavailable before it starts
    if that loop cannot run here."""
    factory = loop_factory(kind)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


def running_kind() -> str:
    """The kind of the running loop (`uvloop` or `asyncio`), as the host's start is logged with it."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
