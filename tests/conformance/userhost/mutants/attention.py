"""Mutants of the owner's attention settings (`attention.settings.*`)."""

from __future__ import annotations

from typing import Any

from . import mutant
from .harness import Message, RequestRewriter


def _zone_to_utc(request: Message) -> list[Message]:
    params: Any = request.get("params")
    if (
        request.get("method") == "plugin/client/request"
        and isinstance(params, dict)
        and params.get("method") == "attention.settings.set"
    ):
        quiet = params.get("params", {}).get("settings", {}).get("quiet_hours")
        if isinstance(quiet, dict):
            quiet["time_zone"] = "UTC"
    return [request]


@mutant(
    "attention-zone-unchecked",
    "saves quiet hours in a time zone it does not know, as if they were in UTC",
    "attention.settings-unknown-zone",
)
class AttentionZoneUnchecked(RequestRewriter):
    """Every time zone of quiet hours becomes `UTC` before the host sees it, so an unknown zone is saved."""

    def rewrite(self, request: Message) -> list[Message]:
        return _zone_to_utc(request)
