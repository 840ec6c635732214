"""A first scenario over the Unix socket: initialize, a plugin call, a notification."""

from __future__ import annotations

import asyncio

from tests.helpers import DEADLINE
from tests.host.userhost.conftest import Connect
from wuu.generated.models import AgentsMainSessionParams, AgentsMainSessionResult, AgentsReactParams


async def test_initialize_call_and_notify(connect: Connect) -> None:
    client, other = await connect(), await connect()
    init = await client.initialize()
    await other.initialize()
    assert (init.user_space_id, init.product_domain) == ("local", "personal")
    assert init.user_host_isolation.to_wire() == {"memory": "logical", "host": "unverified"}
    assert [entry.plugin_id for entry in init.plugins] == ["wuu.test"]
    result = await client.plugin_call("wuu.test", "agents.main_session", AgentsMainSessionParams())
    assert isinstance(result, AgentsMainSessionResult) and result.session_id == "main"
    react = AgentsReactParams(
        session_id="main", message_seq=7, emoji="👍", expected_revision=0, request_id="r1"
    )
    await client.plugin_call("wuu.test", "agents.react", react)
    notices = other.notifications()
    notice = await asyncio.wait_for(anext(notices), DEADLINE)
    assert notice.message_seqs == [7] and notice.graph_generation == init.graph_generation
