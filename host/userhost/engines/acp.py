"""The ACP adapter: an agent program driven over the Agent Client Protocol, in a Wuu permission mode.

The agent advertises its native modes as a session config option of `category=mode`. The adapter applies the
first id of the mode's `mode_ids` that the option offers (AcpPermissionSettings), through
`session/set_config_option`, and checks that the agent then reports it as the option's current value. When the
option offers none of them, the mode's `fallback` applies: `refuse` stops before any prompt,
`host_approval_bridge` keeps the agent's mode and puts every permission request to the host's bridge, and
`auto_accept_once` answers every permission request with its allow-once option. Wherever a mode was applied,
a permission request the agent still sends goes to the bridge too. An allowed request is answered with the
agent's allow-once option, never an allow-always one: the host's answer covers this one request.

The client side is the ACP Python SDK's (`acp`); the client offers no file system or terminal capability, so
the agent uses its own.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import acp
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    SessionConfigOptionSelect,
    SessionConfigSelectGroup,
    TextContentBlock,
    ToolCallUpdate,
)

from wuu.generated.models import AcpModeFallback, ExternalEngine, PermissionMode

from . import programs
from .table import (
    ApprovalBridge,
    EngineApproval,
    EngineFailed,
    EngineRefused,
    EngineTurn,
    ask_bridge,
    settings_for,
)

CLIENT_INFO = Implementation(name="wuu", title="Wuu", version="0.1.0")


@dataclass
class _Client:
    """The client side the agent talks to: permission requests and the text of the current turn."""

    mode: PermissionMode
    bridge: ApprovalBridge
    fallback: AcpModeFallback | None = None
    text: list[str] = field(default_factory=list)

    async def request_permission(
        self, options: list[PermissionOption], session_id: str, tool_call: ToolCallUpdate, **_: Any
    ) -> RequestPermissionResponse:
        if self.fallback is AcpModeFallback.AUTO_ACCEPT_ONCE:
            allowed = True
        else:
            request = {"sessionId": session_id, "toolCall": tool_call.model_dump(mode="json", by_alias=True)}
            title = tool_call.title or f"tool call {tool_call.tool_call_id}"
            allowed = await ask_bridge(
                self.bridge, EngineApproval(ExternalEngine.ACP, self.mode, title, request)
            )
        chosen = next((o for o in options if o.kind == ("allow_once" if allowed else "reject_once")), None)
        if chosen is None:
            # No option says exactly this: cancelling the request is the answer that grants nothing.
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.text.append(update.content.text)


class AcpSession:
    """One session of an ACP agent, in the permission mode it was opened in."""

    def __init__(
        self,
        connection: Any,
        client: _Client,
        session_id: str,
        mode_id: str | None,
        native_modes: dict[str, str],
    ) -> None:
        self._connection = connection
        self._client = client
        self.session_id = session_id
        self.mode_id = mode_id
        """The native mode applied, or None when the mode's fallback applies."""
        self.native_modes = native_modes
        """The agent's own modes, id to label, as its `category=mode` option offers them (for a composer to
        show); empty when it offers none."""

    @property
    def fallback(self) -> AcpModeFallback | None:
        """The fallback in force: None when a native mode was applied."""
        return self._client.fallback

    async def prompt(self, text: str) -> EngineTurn:
        """Send one prompt and wait for the end of its turn."""
        self._client.text.clear()
        try:
            reply = await self._connection.prompt(session_id=self.session_id, prompt=[acp.text_block(text)])
        except acp.RequestError as error:
            raise EngineFailed(f"the agent refused the prompt: {error}") from None
        return EngineTurn("".join(self._client.text), str(reply.stop_reason))


def mode_option(config_options: Sequence[Any] | None) -> SessionConfigOptionSelect | None:
    """The session's `category=mode` select option, if the agent advertises one."""
    return next(
        (
            option
            for option in (config_options or ())
            if isinstance(option, SessionConfigOptionSelect) and option.category == "mode"
        ),
        None,
    )


def option_labels(option: SessionConfigOptionSelect | None) -> dict[str, str]:
    """Every value the option offers, grouped or not, with its label."""
    labels: dict[str, str] = {}
    for entry in option.options if option is not None else ():
        choices = entry.options if isinstance(entry, SessionConfigSelectGroup) else [entry]
        labels.update((choice.value, choice.name) for choice in choices)
    return labels


class AcpEngine:
    """Opens sessions of one ACP agent program (`command`: its argv) in a permission mode."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        if not command:
            raise ValueError("command: the agent's argv is empty")
        self.command = list(command)
        self.env = dict(os.environ if env is None else env)

    @asynccontextmanager
    async def open(
        self, mode: PermissionMode, cwd: Path, bridge: ApprovalBridge
    ) -> AsyncIterator[AcpSession]:
        """Start the agent, open a session in `cwd` and apply `mode`: the session, until the block ends and
        the agent is stopped. EngineRefused when the mode cannot be applied; EngineFailed when the agent
        breaks the protocol or exits."""
        client = _Client(mode, bridge)
        with tempfile.TemporaryFile() as stderr:
            try:
                async with acp.spawn_agent_process(
                    # The SDK answers `method_not_found` for the client methods this one leaves out.
                    cast(acp.Client, client),
                    self.command[0],
                    *self.command[1:],
                    env=self.env,
                    cwd=cwd,
                    transport_kwargs={"stderr": stderr.fileno()},
                ) as (connection, _process):
                    session = await _start(connection, client, mode, cwd)
                    yield session
            except (acp.RequestError, ConnectionError, EOFError) as error:
                raise EngineFailed(
                    f"the ACP agent failed: {error!r}; it said: {programs.said(stderr)}"
                ) from None


async def _start(connection: Any, client: _Client, mode: PermissionMode, cwd: Path) -> AcpSession:
    await connection.initialize(
        protocol_version=acp.PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(terminal=False),
        client_info=CLIENT_INFO,
    )
    session = await connection.new_session(cwd=str(cwd), mcp_servers=[])
    settings = settings_for(mode).acp
    option = mode_option(session.config_options)
    offered = option_labels(option)
    mode_id = next((candidate for candidate in settings.mode_ids if candidate in offered), None)
    if mode_id is None:
        if settings.fallback is AcpModeFallback.REFUSE:
            raise EngineRefused(
                f"the agent offers no mode for {mode.value} (none of {settings.mode_ids} among {list(offered)})"
            )
        client.fallback = settings.fallback
        return AcpSession(connection, client, session.session_id, None, offered)
    assert option is not None
    reply = await connection.set_config_option(
        config_id=option.id, session_id=session.session_id, value=mode_id
    )
    after = mode_option(reply.config_options if reply is not None else None)
    if after is None or after.current_value != mode_id:
        current = after.current_value if after is not None else None
        raise EngineRefused(
            f"the agent reports mode {current!r} after Wuu selected {mode_id!r} for {mode.value}"
        )
    return AcpSession(connection, client, session.session_id, mode_id, offered)
