"""A test plugin for user-host tests: cheap, slow, admitting and notifying methods, all of the spec's catalog.

`wuu.test` (fingerprint `test-1`) serves:
- `agents.main_session`: answers `{session_id: "main"}` at once (the cheap call of round trips);
- `agents.history.search`, whose `query` says what to do: `sleep:S` sleeps S seconds (cancellable) and then
  answers no messages; `admit:NAME:S` admits work that writes `NAME` into the space's state folder after
  S seconds, and answers at once; `fail` raises an unexpected error whose text names a file of the state
  folder (`FAIL_PATH`), which no client may see; anything else answers no messages;
- `agents.send` (it takes the user's input): answers a receipt of the input, unsaved;
- `agents.react`: sends a `reactions` invalidation for the message to the connection's graph, and answers.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from pathlib import Path

from wuu.generated.models import (
    AgentsHistorySearchParams,
    AgentsHistorySearchResult,
    AgentsMainSessionParams,
    AgentsMainSessionResult,
    AgentsReactParams,
    AgentsReactResult,
    AgentsSendParams,
    AgentsSendResult,
    PluginClientInvalidateParams,
)
from wuu.host.userhost import Plugin, PluginCall, UserHost

PLUGIN_ID = "wuu.test"
FINGERPRINT = "test-1"
NOW = "2026-01-01T00:00:00Z"
FAIL_PATH = "private/personal.sqlite"
"""The file, under the state folder, that the error of a `fail` search names."""


def make_test_plugin(host_ref: list[UserHost], state: Path) -> Plugin:
    """The test plugin; `host_ref` holds the host once it is started (notifications go through it)."""

    async def main_session(params: AgentsMainSessionParams, call: PluginCall) -> AgentsMainSessionResult:
        return AgentsMainSessionResult(session_id="main")

    async def history_search(
        params: AgentsHistorySearchParams, call: PluginCall
    ) -> AgentsHistorySearchResult:
        verb, _, rest = params.query.partition(":")
        if verb == "sleep":
            await asyncio.sleep(float(rest))
        elif verb == "admit":
            name, _, seconds = rest.partition(":")
            call.admit(_write_later(state / name, float(seconds)))
        elif verb == "fail":
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(state / FAIL_PATH))
        return AgentsHistorySearchResult(messages=[], next_page_token=None)

    async def send(params: AgentsSendParams, call: PluginCall) -> AgentsSendResult:
        assert call.user_input is not None
        text = call.user_input.text
        receipt = {
            "receipt_id": "rcp-1",
            "revision": 1,
            "session_id": params.session_id,
            "plugin_id": PLUGIN_ID,
            "client_input_id": call.user_input.client_input_id,
            "request_id": call.user_input.request_id,
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "attachments": [],
            "created_at": NOW,
            "accepted": False,
            "accepted_at": None,
            "in_history": False,
            "history_seq": None,
            "read_at": None,
        }
        return AgentsSendResult.model_validate({"receipt": receipt, "replayed": False})

    async def react(params: AgentsReactParams, call: PluginCall) -> AgentsReactResult:
        host = host_ref[0]
        host.notify(
            PluginClientInvalidateParams(
                graph_generation=host.graph.generation,
                plugin_id=PLUGIN_ID,
                topic="reactions",
                session_id=params.session_id,
                message_seqs=[params.message_seq],
            )
        )
        state_ = {"owner": params.emoji, "revision": params.expected_revision + 1}
        return AgentsReactResult.model_validate(
            {
                "session_id": params.session_id,
                "message_seq": params.message_seq,
                "reactions": {key: value for key, value in state_.items() if value is not None},
                "receipt": {
                    "request_id": params.request_id,
                    "session_id": params.session_id,
                    "message_seq": params.message_seq,
                    "actor": "owner",
                    "emoji": params.emoji,
                    "expected_revision": params.expected_revision,
                    "revision": params.expected_revision + 1,
                    "applied_at": NOW,
                },
                "replayed": False,
            }
        )

    return Plugin(
        PLUGIN_ID,
        FINGERPRINT,
        {
            "agents.main_session": main_session,
            "agents.history.search": history_search,
            "agents.send": send,
            "agents.react": react,
        },
    )


async def _write_later(path: Path, seconds: float) -> None:
    await asyncio.sleep(seconds)
    path.write_text("done", encoding="utf-8")
