"""The external-engine permission table (spec/data/engine_permission_modes.json), and what every adapter
shares: a turn's result, the approval bridge, and how an engine says no."""

from __future__ import annotations

import functools
import importlib.resources
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from wuu.generated.models import EnginePermissionRow, EnginePermissionTable, ExternalEngine, PermissionMode

log = logging.getLogger("wuu.host.userhost.engines")


class EngineRefused(Exception):
    """The engine cannot run the conversation in the chosen permission mode: the table says to refuse, or the
    program runs in another mode than the one it was given. Nothing was prompted."""


class EngineFailed(Exception):
    """The engine program failed or broke its protocol: what it said is in the message."""


@dataclass(frozen=True)
class EngineApproval:
    """A permission request of an external engine, put to the host's approval bridge."""

    engine: ExternalEngine
    mode: PermissionMode
    title: str
    """What the engine wants to do, in its own words."""
    request: Mapping[str, Any]
    """The engine's request as it sent it (its JSON), for the host to show."""


ApprovalBridge = Callable[[EngineApproval], Awaitable[bool]]
"""The host's approval bridge: True allows this one request (once), False denies it. A bridge that raises
denies it."""


@dataclass(frozen=True)
class EngineTurn:
    """What one prompt of an external engine ended with: the agent's text, and how the turn stopped (in the
    engine's own words: ACP's `stopReason`, Claude Code's result subtype, Codex's turn status)."""

    text: str
    stop_reason: str


@functools.cache
def permission_table() -> EnginePermissionTable:
    """The table packaged with wuu (the spec's data/engine_permission_modes.json)."""
    data = importlib.resources.files("wuu.generated").joinpath(
        "schema", "data", "engine_permission_modes.json"
    )
    return EnginePermissionTable.model_validate(orjson.loads(data.read_bytes()))


def settings_for(mode: PermissionMode) -> EnginePermissionRow:
    """The adapter settings of every engine for `mode`."""
    table = permission_table()
    row: EnginePermissionRow = getattr(table, mode.value)
    return row


async def ask_bridge(bridge: ApprovalBridge, approval: EngineApproval) -> bool:
    """The bridge's answer; a bridge that fails denies (a failure is never permission)."""
    try:
        return await bridge(approval) is True
    except Exception:
        log.exception(
            "the approval bridge failed on %s's request %r: denied", approval.engine.value, approval.title
        )
        return False
