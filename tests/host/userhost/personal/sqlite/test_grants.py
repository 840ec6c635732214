"""The native authorization provider's grants and leases on a bare SQLite file
(spec/schema/userhost/tasks.schema.json): a fresh check of every effect against the grant as stored, refusals
for a revoked or expired grant and for an effect outside its bounds, revocation final and idempotent, a lease
per positive check with the grant's fence."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from wuu.host.userhost.personal.authorization import AuthorizationRefused, Effect, GrantRequest
from wuu.host.userhost.personal.sqlite import grants
from wuu.host.userhost.services import Caller

from .conftest import Store

REQUEST = GrantRequest(
    "task_1", "ses_task_1", "task-req-1", 1, ("write_file", "exec_command"), ("personal_files",), "stand-in",
    Caller("unix"),
)  # fmt: skip
LOCAL = {"kind": "local_installation"}


def issued(store: Store) -> tuple[str, Effect]:
    grant = grants.issue(
        store.connection, REQUEST, LOCAL, store.clock(), store.clock.now + timedelta(hours=1)
    )
    effect = Effect(
        grant.grant_id, "task_1", "ses_task_1", "task-req-1", 1, "write_file", "personal_files", "card_1"
    )
    return grant.grant_id, effect


def refusal(store: Store, effect: Effect) -> str:
    with pytest.raises(AuthorizationRefused) as refused:
        grants.acquire(store.connection, effect, store.clock())
    return str(refused.value)


def test_every_positive_check_is_a_lease_of_the_grant_as_it_stands(store: Store) -> None:
    _, effect = issued(store)
    first = grants.acquire(store.connection, effect, store.clock())
    second = grants.acquire(store.connection, effect, store.clock())
    assert first.lease_id != second.lease_id and first.fence == second.fence == 0
    assert store.count("native_leases") == 2
    grants.release(store.connection, first, "succeeded", store.clock())
    grants.release(store.connection, first, "failed", store.clock())  # the first outcome stays
    rows = store.connection.execute("SELECT outcome FROM native_leases WHERE lease_id = ?", (first.lease_id,))
    assert rows.fetchall() == [("succeeded",)]


def test_an_effect_outside_the_grant_is_refused(store: Store) -> None:
    _, effect = issued(store)
    assert "does not cover process_start" in refusal(store, replace(effect, tool="process_start"))
    assert "does not cover the resource" in refusal(store, replace(effect, resource="elsewhere"))
    assert "another task" in refusal(store, replace(effect, session_id="ses_main"))
    assert "another task" in refusal(store, replace(effect, requirements_version=2))
    assert "no grant" in refusal(store, replace(effect, grant_id="grant_unknown"))
    assert store.count("native_leases") == 0


def test_revocation_is_final_idempotent_and_refuses_later_checks(store: Store) -> None:
    grant_id, effect = issued(store)
    lease = grants.acquire(store.connection, effect, store.clock())
    revoked = grants.revoke(store.connection, grant_id, store.clock())
    assert revoked is not None and revoked.status.value == "revoked"
    assert grants.revoke(store.connection, grant_id, store.clock()) == revoked
    assert "was revoked" in refusal(store, effect)
    assert lease.fence == 0  # a lease issued before the revocation names the state it was issued in
    (fence,) = store.connection.execute("SELECT fence FROM native_grants").fetchone()
    assert fence == 1
    assert grants.revoke(store.connection, "grant_unknown", store.clock()) is None


def test_an_expired_grant_refuses_and_stays_expired(store: Store) -> None:
    grant_id, effect = issued(store)
    store.clock.now += timedelta(hours=1)
    assert "has expired" in refusal(store, effect)
    expired = grants.revoke(store.connection, grant_id, store.clock())
    assert expired is not None and expired.status.value == "expired" and expired.revoked_at is None


def test_grants_are_listed_newest_first(store: Store) -> None:
    first, _ = issued(store)
    second, _ = issued(store)
    assert [grant.grant_id for grant in grants.grants(store.connection, store.clock())] == [second, first]
