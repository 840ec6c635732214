"""What `wuu-userhost serve` needs of every transport it runs (`Server`), whatever carries the RPC."""

from __future__ import annotations

import asyncio
from typing import Protocol


class Server(Protocol):
    """A transport serving a user host's clients, once started (each transport's class has its own `start`,
    taking the host and what the transport needs)."""

    @property
    def transport(self) -> str:
        """The transport as the host announces it to a host refused on the same space (`unix:PATH`,
        `grpc ADDRESS`, `http ADDRESS`, `stdio`)."""
        ...

    async def ended(self) -> None:
        """Return once the transport has stopped serving by itself: its one client gone (a listener never
        stops by itself). A failure of the transport is raised here."""
        ...

    async def close(self) -> None:
        """Stop serving: every client of the transport is detached; the host goes on."""
        ...


class Listener:
    """The `Server.ended` of a transport that takes new clients until it is closed."""

    async def ended(self) -> None:
        """Never: a listener does not stop by itself."""
        await asyncio.Event().wait()
