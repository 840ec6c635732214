"""Bearer-token authentication of the user host's TCP listeners (HTTP, and gRPC on a TCP address): every
request carries `Authorization: Bearer <token>` (gRPC: the `authorization` metadata) with a token of the
space's token file (spec/schema/userhost/envelope.schema.json, http.schema.json).

The file is read again whenever it changes, on every request and once a second between requests, so a token
created or revoked takes effect without a restart; a revocation calls the listener back, which ends the
revoked token's transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable

from .tokens import TokenEntry, TokenError, TokenStore

log = logging.getLogger("wuu.host.userhost")

AUTHORIZATION = "authorization"
"""The header (HTTP, case-insensitive) and the metadata key (gRPC) that carries the token."""
REFRESH_SECONDS = 1.0
"""How often the token file is checked for revocations between requests."""
BEARER = re.compile(r"Bearer ([A-Za-z0-9._~+/=-]+)")
"""An `Authorization` value with a token (RFC 6750's b64token)."""


class BearerTokens:
    """The tokens one listener accepts, read from the file of `store`. `revoked` is called, with nothing,
    after the file changed, so that the listener ends the transports of tokens it no longer `holds`.

    Each listener reads the file through a store of its own: a store reports a change once, to whoever
    refreshes it first, and every listener must see every revocation."""

    def __init__(self, store: TokenStore, revoked: Callable[[], None]) -> None:
        self.store = TokenStore(store.path, lock_seconds=store.lock_seconds)
        self._revoked = revoked
        self._refresher: asyncio.Task[None] | None = None
        self._problem = ""

    def start(self) -> None:
        """Read the file, and check it once a second from now on."""
        self.store.keep_spare()
        self.refresh()
        self._refresher = asyncio.create_task(self._refresh_every_second())

    async def close(self) -> None:
        """Stop checking the file."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        self.store.close_spare()

    def check(self, authorization: str | None) -> TokenEntry | None:
        """The token entry of an `Authorization` value (`Bearer <token>`), or None when it names no valid
        token. The tokens' digests are compared in constant time; a token is never logged."""
        self.refresh()
        found = BEARER.fullmatch(authorization or "")
        return self.store.authenticate(found.group(1)) if found else None

    def holds(self, sha256: str) -> bool:
        """Whether the token of this digest is still valid, as the file was last read."""
        return self.store.holds(sha256)

    def refresh(self) -> None:
        """Read the file again if it changed; a change calls `revoked`. A file that cannot be read holds no
        tokens: every client is refused until it is fixed."""
        try:
            changed = self.store.refresh()
        except TokenError as error:
            if str(error) != self._problem:  # once per problem, not once per request
                log.error("the token file cannot be read", extra={"error": str(error)})
            self._problem = str(error)
            changed = True
        else:
            self._problem = ""
        if changed:
            self._revoked()

    async def _refresh_every_second(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                self.refresh()
            except Exception:  # a listener's revocations must go on being checked whatever one check met
                log.exception("checking the token file failed")
