"""Cases of the owner's attention settings (spec/schema/userhost/attention.schema.json): a new space's
defaults, a change read back and kept across a kill (SIGKILL) and a start on the same home, and a time zone
the host does not know. What the settings do to notifications reaches a phone, not the wire: the suite cannot
observe it."""

from __future__ import annotations

from typing import Any

from ..personal import open_main
from ..session import HostSession
from ..suite import USERHOST

READ = "attention.settings.read"
SET = "attention.settings.set"
DEFAULTS = {"notifications": True, "grouping_window_seconds": 0}
CHANGED = {
    "notifications": False,
    "grouping_window_seconds": 120,
    "quiet_hours": {"start": "22:30", "end": "06:45", "time_zone": "UTC"},
}


async def settings(host: HostSession) -> dict[str, Any]:
    found: dict[str, Any] = (await host.call_ok(READ, {}))["settings"]
    return found


@USERHOST.case("attention.settings-default")
async def defaults(host: HostSession) -> None:
    """A new space notifies, without quiet hours or grouping."""
    await open_main(host)
    found = await settings(host)
    host.expect(found == DEFAULTS, f"a new space's attention settings are {found}, not {DEFAULTS}")


@USERHOST.case("attention.settings-kept")
async def kept(host: HostSession) -> None:
    """attention.settings.set answers the settings as given, attention.settings.read reads them back, and they
    are still there after the host is killed (SIGKILL) the moment the answer arrives and started again."""
    await open_main(host)
    saved = (await host.call_ok(SET, {"settings": CHANGED}))["settings"]
    await host.kill()
    host.expect(saved == CHANGED, f"attention.settings.set answered {saved}, not the settings given")
    await host.restart()
    await open_main(host)
    found = await settings(host)
    host.expect(
        found == CHANGED, f"after a kill and a start the attention settings are {found}, not {CHANGED}"
    )
    cleared = {**DEFAULTS, "grouping_window_seconds": 30}
    saved = (await host.call_ok(SET, {"settings": cleared}))["settings"]
    host.expect(saved == cleared, f"settings without quiet hours answered {saved}: the quiet hours stayed")


@USERHOST.case("attention.settings-unknown-zone")
async def unknown_zone(host: HostSession) -> None:
    """Quiet hours in a time zone the host does not know get invalid_params naming the zone, and the settings
    stay as they were."""
    await open_main(host)
    quiet = {"start": "22:00", "end": "07:00", "time_zone": "Nowhere/Atlantis_Deep"}
    await host.call_error(
        SET,
        {"settings": {**DEFAULTS, "quiet_hours": quiet}},
        "invalid_params",
        field="params.settings.quiet_hours.time_zone",
    )
    found = await settings(host)
    host.expect(found == DEFAULTS, f"a refused change left the attention settings at {found}")
