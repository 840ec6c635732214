"""A short Personal session over the Unix socket: send input with an attachment, the stand-in agent reads
and answers it, receipts, history, reactions and search see it."""

from __future__ import annotations

from tests.host.userhost.personal.conftest import Inputs, Space, attachment, call, result, send
from wuu.host.userhost.client import UserHostClient


async def test_a_short_session(space: Space, client: UserHostClient, inputs: Inputs) -> None:
    sent = result(await send(client, space.main, inputs("Plan the trip", [attachment(b"Lisbon, May")])))
    receipt = sent["receipt"]
    assert (receipt["accepted"], receipt["in_history"], receipt["history_seq"], receipt["read_at"]) == (
        True,
        True,
        1,
        None,
    )
    await space.idle()
    (read,) = result(
        await call(client, "agents.receipts", {"session_id": space.main, "client_input_ids": ["in-1"]})
    )["receipts"]
    assert read["read_at"] is not None and read["revision"] == 2
    page = result(await call(client, "agents.history.read", {"session_id": space.main}))
    assert [(m["message_seq"], m["role"], m["text"]) for m in page["messages"]] == [
        (2, "assistant", "Received: Plan the trip"),
        (1, "user", "Plan the trip"),
    ]
    assert page["next_before_seq"] is None
    reacted = result(
        await call(
            client,
            "agents.react",
            {
                "session_id": space.main,
                "message_seq": 2,
                "emoji": "🎉",
                "expected_revision": 0,
                "request_id": "r1",
            },
        )
    )
    assert reacted["reactions"] == {"owner": "🎉", "revision": 1}
    found = result(await call(client, "agents.history.search", {"session_id": space.main, "query": "TRIP"}))
    assert [m["message_seq"] for m in found["messages"]] == [2, 1]
    assert found["messages"][0]["reactions"] == {"owner": "🎉", "revision": 1}
