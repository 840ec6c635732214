"""The `execution.authorization@1` provider interface: the grants of unattended authority that background tasks
run under (spec/schema/userhost/tasks.schema.json).

A provider issues a finite, revocable grant for one task's execution attempt, checks each effect afresh before
the host claims it (`acquire`, handing out a fenced lease), is told when the effect ended (`release`), and
revokes. The host keeps only a grant's ID and expiry. A refusal is `AuthorizationRefused`; a check whose outcome
is not known is `AuthorizationUnknown`, and the host fails closed on it as on a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from wuu.generated.models import TaskGrant

from ..services import Caller

GRANT_LIFETIME = timedelta(hours=1)
"""How long a Personal task's grant lasts (the spec allows at most 24 hours)."""
PERSONAL_FILES = "personal_files"
"""The resource of every Personal task's effects: the Personal files root."""


class AuthorizationRefused(Exception):
    """The provider refused: no grant, or no effect under it."""


class AuthorizationUnknown(Exception):
    """The provider's answer is not known (unreachable, failed, timed out): nothing is authorized."""


@dataclass(frozen=True)
class GrantRequest:
    """What a task asks to be authorized for, and on whose admission."""

    task_id: str
    session_id: str
    """The task's hidden session."""
    request_id: str
    """The task's dispatch request ID."""
    requirements_version: int
    tools: tuple[str, ...]
    resources: tuple[str, ...]
    model: str
    admitted_by: Caller | None
    """The transport that admitted the user input the task answers; None when it is not known."""


@dataclass(frozen=True)
class Effect:
    """One effect of a task, to be checked before its execution claim."""

    grant_id: str
    task_id: str
    session_id: str
    request_id: str
    requirements_version: int
    tool: str
    resource: str
    card_id: str


@dataclass(frozen=True)
class Lease:
    """A positive check of one effect, good for its one execution claim."""

    lease_id: str
    grant_id: str
    fence: int
    """The grant's fence at the check: revocation raises it, so a lease names the state it was issued in."""


class AuthorizationProvider(Protocol):
    """An `execution.authorization@1` provider."""

    name: str
    """The provider's name, as grants report it (`native` for the bundled one)."""

    async def issue(self, request: GrantRequest, now: datetime) -> TaskGrant:
        """A new grant for `request`. AuthorizationRefused, AuthorizationUnknown."""

    async def acquire(self, effect: Effect, now: datetime) -> Lease:
        """Check `effect` against its grant as it is now; a lease for its claim. AuthorizationRefused when the
        grant is revoked, expired, or does not cover the effect; AuthorizationUnknown."""

    async def release(self, lease: Lease, outcome: str, now: datetime) -> None:
        """The effect of `lease` ended with `outcome` (its receipt's)."""

    async def revoke(self, grant_id: str, now: datetime) -> TaskGrant | None:
        """Revoke a grant (final, idempotent); None when the provider knows no such grant."""

    async def grants(self, now: datetime) -> list[TaskGrant]:
        """The grants, newest first, at most 100, with their status at `now`."""
