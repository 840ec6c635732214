"""Mutants of background tasks under grants: the grant's bounds and expiry, the task's cards, revocation and
the effect check after it, completion on the evidence of the task's cards, and a retried input that starts its
task again."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from wuu.generated.models import (
    AgentsSendResult,
    TaskAuthority,
    TaskGrant,
    TasksGrantsListResult,
    TasksGrantsRevokeParams,
    UserHostErrorCode,
)
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.approval_ledger import NewCard, StoredCard
from wuu.host.userhost.personal.authorization import (
    AuthorizationProvider,
    AuthorizationRefused,
    Effect,
    Lease,
)
from wuu.host.userhost.personal.dispatch_ledger import CardOutcome, DispatchLedger
from wuu.host.userhost.personal.provider import SessionDomain, TaskStateError
from wuu.host.userhost.personal.sqlite.native_authorization import NativeAuthorization
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain
from wuu.host.userhost.personal.stamps import rfc3339
from wuu.host.userhost.plugins import PluginCall, PluginHandler

from . import mutant
from .approvals import LedgerProxy, with_ledger
from .harness import CallWith, ProviderProxy, rewrite_result, with_provider, wrap_method

GRANTS = "tasks.grants.list"
REVOKE = "tasks.grants.revoke"


class AuthorizationProxy:
    """An `execution.authorization@1` provider that serves everything from the one it wraps; a mutant
    overrides one method."""

    def __init__(self, inner: AuthorizationProvider) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def with_authorization(proxy: type[AuthorizationProxy]) -> Composer:
    """The reference composer whose native provider is wrapped by `proxy`."""

    def select(store: SessionDomain) -> AuthorizationProvider:
        wrapped: AuthorizationProvider = proxy(store.native_authorization())
        return wrapped

    return personal(authorization=select)


def listed_grants(change: Any) -> Composer:
    """The reference composer whose `tasks.grants.list` answers each grant as `change(grant)` makes it."""

    def rewrite(result: TasksGrantsListResult, params: Any) -> TasksGrantsListResult:
        return result.model_copy(update={"grants": [change(grant) for grant in result.grants]})

    return rewrite_result(GRANTS, rewrite)


# --- the grant --------------------------------------------------------------------------------------


@mutant(
    "grant-listed-without-its-tool",
    "lists a task's grant with its tools narrowed to exec_command, leaving out the write_file its card uses",
    "tasks.grant-bound",
)
def grant_listed_without_its_tool() -> Composer:
    """`tasks.grants.list` answers every grant with the tools `["exec_command"]`."""
    return listed_grants(lambda grant: grant.model_copy(update={"tools": ["exec_command"]}))


@mutant(
    "grant-lasts-two-days",
    "issues task grants that last two days, beyond the 24 hours a grant may last",
    "tasks.grant-finite",
)
def grant_lasts_two_days() -> Composer:
    """The native provider is built with a two-day grant lifetime."""

    def select(store: SessionDomain) -> AuthorizationProvider:
        assert isinstance(store, SqliteSessionDomain)
        return NativeAuthorization(store.database, lifetime=timedelta(days=2))

    return personal(authorization=select)


def _account(grant: TaskGrant) -> TaskGrant:
    authority = TaskAuthority.model_validate(
        {"kind": "account", "issuer": "https://id.example", "tenant": "home", "subject": "owner"}
    )
    return grant.model_copy(update={"authority": authority})


@mutant(
    "local-task-granted-account-authority",
    "lists the grant of a task started over stdio as carrying an account's authority",
    "tasks.local-authority",
)
def local_task_granted_account_authority() -> Composer:
    """`tasks.grants.list` answers every grant with an account authority (issuer, tenant, subject)."""
    return listed_grants(_account)


# --- the task's card and its completion -------------------------------------------------------------


class LateExpiry(LedgerProxy):
    """A task's card is saved expiring an hour after it is made."""

    async def create(self, card_id: str, new: NewCard, now: datetime) -> tuple[StoredCard, bool]:
        if new.source == "task":
            new = replace(new, expires_at=now + timedelta(hours=1))
        made: tuple[StoredCard, bool] = await self.inner.create(card_id, new, now)
        return made


@mutant(
    "task-card-expires-after-an-hour",
    "saves a task's card expiring an hour after it is made instead of 30 minutes",
    "tasks.task-card",
)
def task_card_expires_after_an_hour() -> Composer:
    """The approval ledger saves each task card with `expires_at` an hour after its creation."""
    return with_ledger(LateExpiry)


class UnauthorizedAsSucceeded:
    """The runner reads a task's unauthorized cards as succeeded, and a result the store refuses for want of
    evidence is delivered all the same."""

    def __init__(self, inner: DispatchLedger) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def cards(self, task_id: str) -> list[CardOutcome]:
        cards: list[CardOutcome] = await self.inner.cards(task_id)
        return [replace(c, status="succeeded") if c.status == "unauthorized" else c for c in cards]

    async def complete(self, task_id: str, attempt: int, text: str, now: datetime) -> str | None:
        try:
            delivery: str | None = await self.inner.complete(task_id, attempt, text, now)
        except TaskStateError:
            delivery = await self.inner.fail(task_id, attempt, "failed", text, now)
        return delivery


@mutant(
    "unauthorized-task-reported-done",
    "reports a task done, its card succeeded, although the card ended unauthorized",
    "tasks.revoked-unauthorized",
)
def unauthorized_task_reported_done() -> Composer:
    """The dispatch ledger hands the runner every unauthorized card of a task as succeeded, so the runner
    words the task's reply as done; the store still refuses the result without evidence, and the reply is
    delivered as the task's end anyway."""

    class Provider(ProviderProxy):
        def dispatch_ledger(self) -> DispatchLedger:
            wrapped: DispatchLedger = UnauthorizedAsSucceeded(self.inner.dispatch_ledger())
            return wrapped

    return with_provider(Provider)


# --- revocation -------------------------------------------------------------------------------------


class RefusalIgnored(AuthorizationProxy):
    """An effect the grant no longer authorizes gets a lease anyway."""

    async def acquire(self, effect: Effect, now: datetime) -> Lease:
        try:
            lease: Lease = await self.inner.acquire(effect, now)
        except AuthorizationRefused:
            return Lease(f"lease_{secrets.token_hex(16)}", effect.grant_id, 0)
        return lease


@mutant(
    "revoked-grant-authorizes",
    "runs a task's effect after its grant was revoked: the check before the claim ignores the revocation",
    "tasks.revoked-unauthorized",
)
def revoked_grant_authorizes() -> Composer:
    """The native provider's effect check hands out a lease whenever the grant refuses the effect."""
    return with_authorization(RefusalIgnored)


class RevokeReported(AuthorizationProxy):
    """A revocation is answered and nothing is revoked."""

    def __init__(self, inner: AuthorizationProvider) -> None:
        super().__init__(inner)
        self.answered: dict[str, TaskGrant] = {}

    async def revoke(self, grant_id: str, now: datetime) -> TaskGrant | None:
        if grant_id not in self.answered:
            found = [grant for grant in await self.inner.grants(now) if grant.grant_id == grant_id]
            if not found:
                return None
            update = {"status": "revoked", "revoked_at": rfc3339(now)}
            self.answered[grant_id] = TaskGrant.model_validate({**found[0].to_wire(), **update})
        return self.answered[grant_id]


@mutant(
    "revoke-keeps-grant-active",
    "answers a revocation with the grant revoked but keeps it active, so the task's effects still run",
    "tasks.revoke",
    "tasks.revoked-unauthorized",
)
def revoke_keeps_grant_active() -> Composer:
    """The native provider answers `revoke` with the grant as revoked (the same answer each time) without
    revoking it."""
    return with_authorization(RevokeReported)


class Restamped(AuthorizationProxy):
    """Each revocation answers the grant revoked now."""

    async def revoke(self, grant_id: str, now: datetime) -> TaskGrant | None:
        grant: TaskGrant | None = await self.inner.revoke(grant_id, now)
        if grant is None or grant.revoked_at is None:
            return grant
        return TaskGrant.model_validate({**grant.to_wire(), "revoked_at": rfc3339(now)})


@mutant(
    "revoke-again-restamps",
    "answers a second revocation of a revoked grant with a new revoked_at instead of the grant unchanged",
    "tasks.revoke",
)
def revoke_again_restamps() -> Composer:
    """The native provider answers every revocation with `revoked_at` the time of that call."""
    return with_authorization(Restamped)


@mutant(
    "unknown-grant-invalid-params",
    "answers the revocation of a grant the host does not know invalid_params instead of not_found",
    "tasks.revoke-not-found",
)
def unknown_grant_invalid_params() -> Composer:
    """The `tasks.grants.revoke` handler turns its not_found refusals into invalid_params."""

    def make(handler: PluginHandler) -> PluginHandler:
        async def broken(params: TasksGrantsRevokeParams, call: PluginCall) -> WireModel:
            try:
                return await handler(params, call)
            except UserHostError as error:
                if error.code is not UserHostErrorCode.NOT_FOUND:
                    raise
                raise UserHostError(
                    UserHostErrorCode.INVALID_PARAMS, "no such grant", "params.grant_id"
                ) from None

        return broken

    return wrap_method(REVOKE, make)


# --- a retried input ----------------------------------------------------------------------------------


@mutant(
    "replayed-input-starts-another-task",
    "answers a retried input replayed but admits it again, so the agent starts its task a second time",
    "tasks.start-once",
    "admission.replay",
)
def replayed_input_starts_another_task() -> Composer:
    """The `agents.send` handler answers a retry with the first receipt (replayed true), then admits the
    same text once more under request and client input IDs of its own."""
    fresh = itertools.count(1)

    def make(handler: PluginHandler) -> PluginHandler:
        async def send(params: Any, call: PluginCall) -> WireModel:
            result = await handler(params, call)
            if isinstance(result, AgentsSendResult) and result.replayed and call.user_input is not None:
                number = next(fresh)
                again = call.user_input.model_copy(
                    update={
                        "client_input_id": f"{call.user_input.client_input_id}.m{number}",
                        "request_id": f"{call.user_input.request_id}.m{number}",
                    }
                )
                await handler(params, CallWith(call, again))
            return result

        return send

    return wrap_method("agents.send", make)
