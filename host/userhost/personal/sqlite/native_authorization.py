"""The bundled native `execution.authorization@1` provider (spec/schema/userhost/tasks.schema.json): it issues
local-installation authority only, and keeps its grants and leases in the space's store."""

from __future__ import annotations

from datetime import datetime, timedelta

from wuu.generated.models import TaskGrant

from ...services import Caller
from ..authorization import GRANT_LIFETIME, AuthorizationRefused, Effect, GrantRequest, Lease
from . import grants
from .database import Database

LOCAL_TRANSPORTS = frozenset({"stdio", "unix", "embedding"})
"""The transports only the local installation reaches: a private pipe, a 0600 Unix socket, the embedding API in
the host's own process. HTTP and gRPC clients authenticate with tokens, which a paired phone or a remote owner
may hold."""


def local_installation(caller: Caller | None) -> bool:
    """Whether an input admitted by `caller` carries the local installation's authority."""
    return caller is not None and caller.device_id is None and caller.transport in LOCAL_TRANSPORTS


class NativeAuthorization:
    """The native provider on one space's store."""

    name = "native"

    def __init__(self, database: Database, lifetime: timedelta = GRANT_LIFETIME) -> None:
        self._database = database
        self._lifetime = lifetime

    async def issue(self, request: GrantRequest, now: datetime) -> TaskGrant:
        caller = request.admitted_by
        if not local_installation(caller):
            through = "an unknown transport" if caller is None else f"the {caller.transport} transport"
            raise AuthorizationRefused(
                f"the native provider issues local-installation authority only; the input came through {through}"
            )
        authority = {"kind": "local_installation"}
        expires = now + self._lifetime
        return await self._database.write(grants.issue, request, authority, now, expires)

    async def acquire(self, effect: Effect, now: datetime) -> Lease:
        return await self._database.write(grants.acquire, effect, now)

    async def release(self, lease: Lease, outcome: str, now: datetime) -> None:
        await self._database.write(grants.release, lease, outcome, now)

    async def revoke(self, grant_id: str, now: datetime) -> TaskGrant | None:
        return await self._database.write(grants.revoke, grant_id, now)

    async def grants(self, now: datetime) -> list[TaskGrant]:
        return await self._database.read(lambda c: grants.grants(c, now))
