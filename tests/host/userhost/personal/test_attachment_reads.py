"""The agents' attachment adapters (spec/schema/userhost/personal.schema.json, ReadAttachmentArguments), against a
real Personal host: the main agent reads the main conversation's attachments in base64 chunks as
`host.session.attachment.read` gives them, and a background task's adapter reads only those of the input whose
answer started it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

from wuu.generated import models as m
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import PersonalPlugin, personal
from wuu.host.userhost.personal.attachment_reads import AgentAttachments, TaskAttachments, read_attachment

DEADLINE_S = 20.0
CONTENT = b"the owner's packing list\n" * 40


def attachment(name: str, content: bytes) -> m.UserInputAttachment:
    return m.UserInputAttachment(
        filename=name,
        media_type="text/plain",
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        data=base64.b64encode(content).decode(),
    )


async def send(client: UserHostClient, main: str, n: int, text: str, *files: m.UserInputAttachment) -> int:
    fields = {"client_input_id": f"in-{n}", "request_id": f"req-{n}", "text": text}
    user_input = m.UserInput.model_validate({**fields, **({"attachments": list(files)} if files else {})})
    sent = await client.plugin_call(
        "wuu.personal", "agents.send", m.AgentsSendParams(session_id=main), user_input=user_input
    )
    seq: int = sent.receipt.history_seq
    return seq


async def answer(client: UserHostClient, main: str, after: int) -> str:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while True:
        history = await client.plugin_call(
            "wuu.personal", "agents.history.read", m.AgentsHistoryReadParams(session_id=main)
        )
        said = [message.text for message in history.messages if message.message_seq > after]
        if said:
            return said[-1]
        assert loop.time() < end, "the agent did not answer"
        await asyncio.sleep(0.05)


async def test_the_agents_read_the_attachments_of_their_scope(tmp_path: Path) -> None:
    plugins: list[PersonalPlugin] = []
    host = await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=tmp_path,
        compose=[personal(started=plugins.append)],
    )
    server = await UnixServer.start(host, tmp_path / "run" / "userhost.sock")
    client = await UserHostClient.connect_unix(server.path)
    try:
        await client.initialize()
        main = (
            await client.plugin_call("wuu.personal", "agents.main_session", m.AgentsMainSessionParams())
        ).session_id
        first = await send(client, main, 1, "here is my list", attachment("list.txt", CONTENT))
        await answer(client, main, first)
        await answer(
            client, main, await send(client, main, 2, "and a note", attachment("note.txt", b"a note"))
        )
        history = await client.plugin_call(
            "wuu.personal", "agents.history.read", m.AgentsHistoryReadParams(session_id=main)
        )
        [listed] = [message.attachments[0] for message in history.messages if message.message_seq == first]
        told = await answer(client, main, await send(client, main, 3, f"/read {listed.attachment_id}"))
        chunk = json.loads(told)
        assert chunk["attachment"] == listed.model_dump(mode="json") and chunk["eof"] is True
        assert base64.b64decode(chunk["data"]) == CONTENT
        assert chunk["final_sha256"] == hashlib.sha256(CONTENT).hexdigest()
        told = await answer(client, main, await send(client, main, 4, "/read att_not_there"))
        assert told == "refused (not_found): no attachment att_not_there"

        store = plugins[0].store
        arguments = {"attachment_id": listed.attachment_id, "offset": 0, "max_chars": 8}
        assert json.loads(await read_attachment(AgentAttachments(store), arguments))["next_offset"] == 8
        from_origin = json.loads(await read_attachment(TaskAttachments(store, "in-1"), arguments))
        assert base64.b64decode(from_origin["data"]) == CONTENT[:6] and from_origin["eof"] is False
        for other in ("in-2", None):  # another input's task, or a task no input started
            told = await read_attachment(TaskAttachments(store, other), arguments)
            assert told == f"refused (not_found): no attachment {listed.attachment_id}"
        past = await read_attachment(AgentAttachments(store), {**arguments, "offset": 4 * 1024 * 1024})
        assert past.startswith("refused (invalid_params): offset: ")
    finally:
        await client.close()
        await server.close()
        await host.close()
