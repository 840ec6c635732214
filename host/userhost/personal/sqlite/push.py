"""Push registrations in the bundled store (spec/schema/userhost/push.schema.json): one per device and app."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from wuu.generated.models import PushProvider, PushRegisterResult

from ..provider import PushTarget
from ..stamps import rfc3339
from .sessions import new_id


def register(
    connection: sqlite3.Connection,
    device_id: str,
    provider: PushProvider,
    app_id: str,
    token: str,
    now: datetime,
) -> PushRegisterResult:
    """Save the device's registration for `app_id`, replacing the device's previous one for it."""
    registration_id, stamp = new_id("push"), rfc3339(now)
    connection.execute(
        "DELETE FROM push_registrations WHERE device_id = ? AND app_id = ?", (device_id, app_id)
    )
    connection.execute(
        "INSERT INTO push_registrations VALUES (?, ?, ?, ?, ?, ?)",
        (registration_id, device_id, provider.value, app_id, token, stamp),
    )
    return PushRegisterResult(
        registration_id=registration_id, device_id=device_id, provider=provider, registered_at=stamp
    )


def unregister(connection: sqlite3.Connection, device_id: str, registration_id: str) -> bool:
    """Remove the device's registration; False when the device has no such registration."""
    return bool(
        connection.execute(
            "DELETE FROM push_registrations WHERE registration_id = ? AND device_id = ?",
            (registration_id, device_id),
        ).rowcount
    )


def registrations(connection: sqlite3.Connection) -> list[PushTarget]:
    """Every saved registration, in the order they were saved, with its push token (for the phone provider)."""
    rows = connection.execute(
        "SELECT registration_id, device_id, provider, app_id, token FROM push_registrations "
        "ORDER BY registered_at, registration_id"
    )
    return [
        PushTarget(registration_id, device_id, PushProvider(provider), app_id, token)
        for registration_id, device_id, provider, app_id, token in rows
    ]
