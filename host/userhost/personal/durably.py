"""Awaiting a durable write to its end from a call that may be cancelled meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def durably(write: Awaitable[T]) -> T:
    """Await a store write to its end even when the call is cancelled meanwhile: once a write is submitted
    its outcome is the call's answer (a cancelled call still gets exactly one reply, here its result)."""
    task = asyncio.ensure_future(write)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return task.result()
