"""The owner's attention settings in the bundled store (spec/schema/userhost/attention.schema.json): one row,
absent until the owner first sets them."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from wuu.generated.models import AttentionSettings, QuietHours

from ..stamps import rfc3339

DEFAULT = AttentionSettings(notifications=True, grouping_window_seconds=0)
"""A new space's settings: notifications on, no quiet hours, no grouping."""


def read(connection: sqlite3.Connection) -> AttentionSettings:
    """The current settings."""
    row = connection.execute(
        "SELECT notifications, quiet_start, quiet_end, quiet_time_zone, grouping_window_seconds "
        "FROM attention_settings WHERE id = 1"
    ).fetchone()
    if row is None:
        return DEFAULT
    notifications, start, end, time_zone, window = row
    settings = AttentionSettings(notifications=bool(notifications), grouping_window_seconds=window)
    if start is not None:  # absent, not null, when there are none
        settings.quiet_hours = QuietHours(start=start, end=end, time_zone=time_zone)
    return settings


def save(connection: sqlite3.Connection, settings: AttentionSettings, now: datetime) -> AttentionSettings:
    """Replace the settings as a whole."""
    quiet = settings.quiet_hours
    connection.execute(
        "INSERT OR REPLACE INTO attention_settings VALUES (1, ?, ?, ?, ?, ?, ?)",
        (
            int(settings.notifications),
            None if quiet is None else quiet.start,
            None if quiet is None else quiet.end,
            None if quiet is None else quiet.time_zone,
            settings.grouping_window_seconds,
            rfc3339(now),
        ),
    )
    return read(connection)
