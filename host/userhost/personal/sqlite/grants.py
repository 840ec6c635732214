"""The bundled native `execution.authorization@1` provider's grants and leases, kept in the space's store
(spec/schema/userhost/tasks.schema.json). Each function runs in one transaction of the database's writer, so a
revocation and a check of the same grant resolve by commit order: a check that commits after the revocation
refuses, and a lease issued before it keeps its effect (revocation never undoes a claimed effect)."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from wuu.generated.models import TaskGrant

from ..authorization import AuthorizationRefused, Effect, GrantRequest, Lease
from ..stamps import micros, rfc3339

GRANT_COLUMNS = (
    "grant_id, task_id, session_id, request_id, requirements_version, tools, resources, model, authority, "
    "issued_at, expires_at, expires_us, revoked_at"
)
LIST_LIMIT = 100


def issue(
    connection: sqlite3.Connection,
    request: GrantRequest,
    authority: dict[str, Any],
    now: datetime,
    expires: datetime,
) -> TaskGrant:
    """Save a new grant for `request` carrying `authority`, good until `expires`."""
    grant_id = f"grant_{secrets.token_hex(16)}"
    connection.execute(
        f"INSERT INTO native_grants ({GRANT_COLUMNS}, fence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0)",
        (
            grant_id,
            request.task_id,
            request.session_id,
            request.request_id,
            request.requirements_version,
            orjson.dumps(list(request.tools)).decode(),
            orjson.dumps(list(request.resources)).decode(),
            request.model,
            orjson.dumps(authority).decode(),
            rfc3339(now),
            rfc3339(expires),
            micros(expires),
        ),
    )
    found = grant(connection, grant_id, now)
    assert found is not None
    return found


def grant(connection: sqlite3.Connection, grant_id: str, now: datetime) -> TaskGrant | None:
    """The grant with its status at `now`, or None."""
    row = connection.execute(
        f"SELECT {GRANT_COLUMNS} FROM native_grants WHERE grant_id = ?", (grant_id,)
    ).fetchone()
    return None if row is None else _grant(row, now)


def grants(connection: sqlite3.Connection, now: datetime) -> list[TaskGrant]:
    """The newest grants first, at most LIST_LIMIT."""
    rows = connection.execute(
        f"SELECT {GRANT_COLUMNS} FROM native_grants ORDER BY issued_at DESC, grant_id LIMIT ?", (LIST_LIMIT,)
    ).fetchall()
    return [_grant(row, now) for row in rows]


def acquire(connection: sqlite3.Connection, effect: Effect, now: datetime) -> Lease:
    """Check `effect` against its grant as stored now and save a lease for it. AuthorizationRefused."""
    row = connection.execute(
        "SELECT task_id, session_id, request_id, requirements_version, tools, resources, expires_us, revoked_at, "
        "fence FROM native_grants WHERE grant_id = ?",
        (effect.grant_id,),
    ).fetchone()
    if row is None:
        raise AuthorizationRefused(f"no grant {effect.grant_id}")
    task_id, session_id, request_id, version, tools, resources, expires_us, revoked_at, fence = row
    if revoked_at is not None:
        raise AuthorizationRefused(f"grant {effect.grant_id} was revoked at {revoked_at}")
    if micros(now) >= expires_us:
        raise AuthorizationRefused(f"grant {effect.grant_id} has expired")
    bound = (task_id, session_id, request_id, version)
    if bound != (effect.task_id, effect.session_id, effect.request_id, effect.requirements_version):
        raise AuthorizationRefused(
            f"grant {effect.grant_id} is for another task, request or requirements version"
        )
    if effect.tool not in orjson.loads(tools):
        raise AuthorizationRefused(f"grant {effect.grant_id} does not cover {effect.tool}")
    if effect.resource not in orjson.loads(resources):
        raise AuthorizationRefused(f"grant {effect.grant_id} does not cover the resource {effect.resource}")
    lease_id = f"lease_{secrets.token_hex(16)}"
    connection.execute(
        "INSERT INTO native_leases VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)",
        (lease_id, effect.grant_id, fence, effect.card_id, effect.tool, rfc3339(now)),
    )
    return Lease(lease_id, effect.grant_id, fence)


def release(connection: sqlite3.Connection, lease: Lease, outcome: str, now: datetime) -> None:
    """Record that the effect of `lease` ended; a lease released already keeps its first outcome."""
    connection.execute(
        "UPDATE native_leases SET released_at = ?, outcome = ? WHERE lease_id = ? AND released_at IS NULL",
        (rfc3339(now), outcome, lease.lease_id),
    )


def revoke(connection: sqlite3.Connection, grant_id: str, now: datetime) -> TaskGrant | None:
    """Revoke an active grant and raise its fence; a revoked or expired one is left as it is."""
    connection.execute(
        "UPDATE native_grants SET revoked_at = ?, fence = fence + 1 "
        "WHERE grant_id = ? AND revoked_at IS NULL AND expires_us > ?",
        (rfc3339(now), grant_id, micros(now)),
    )
    return grant(connection, grant_id, now)


def _grant(row: Sequence[Any], now: datetime) -> TaskGrant:
    (grant_id, task_id, session_id, request_id, version, tools, resources, model, authority, issued_at,
     expires_at, expires_us, revoked_at) = row  # fmt: skip
    status = "revoked" if revoked_at is not None else "expired" if micros(now) >= expires_us else "active"
    fields: dict[str, Any] = {
        "grant_id": grant_id,
        "provider": "native",
        "task_id": task_id,
        "session_id": session_id,
        "request_id": request_id,
        "requirements_version": version,
        "tools": orjson.loads(tools),
        "resources": orjson.loads(resources),
        "model": model,
        "permission_mode": "standard",
        "authority": orjson.loads(authority),
        "issued_at": issued_at,
        "expires_at": expires_at,
        "status": status,
    }
    if revoked_at is not None:
        fields["revoked_at"] = revoked_at
    return TaskGrant.model_validate(fields)
