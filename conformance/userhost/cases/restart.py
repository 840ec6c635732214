"""Cases of a host started again on the same home (spec/schema/userhost/personal.schema.json): what it
acknowledged before a kill (SIGKILL) is still there, and a clean stop and start keep the main conversation.

The runner owns the host's process: a case kills or stops it and starts the command again on the same
`{home}` (`HostSession.kill`, `stop`, `restart`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..personal import (
    attachment,
    b64,
    content,
    history,
    open_main,
    reassemble,
    receipts,
    send_input,
    user_input,
)
from ..session import HostSession
from ..suite import USERHOST
from .admission import expect_same_receipt

KEPT_FILE = content(100_000, 9)
"""The attachment of the input acknowledged just before a kill."""


async def expect_kept(
    host: HostSession,
    main: str,
    envelope: Mapping[str, Any],
    receipt: Mapping[str, Any],
    contents: Sequence[bytes],
    what: str,
) -> None:
    """Fail unless the input the host acknowledged with `receipt` before it ended is still there: its receipt
    (as it may since stand), a retry that replays it, its attachments' bytes, its message in the history."""
    stored = await receipts(host, envelope["client_input_id"])
    host.expect(len(stored) == 1, f"{what}: agents.receipts has {len(stored)} receipts of the input, not 1")
    expect_same_receipt(host, stored[0], receipt, f"{what}: the stored receipt")
    retry = await send_input(host, envelope)
    host.expect(retry["replayed"] is True, f"{what}: a retry of the input (its request ID) was admitted anew")
    expect_same_receipt(host, retry["receipt"], receipt, f"{what}: the retry's receipt")
    for data, metadata in zip(contents, receipt["attachments"], strict=True):
        joined = await reassemble(host, main, metadata)
        host.expect(
            joined == b64(data), f"{what}: the attachment {metadata['filename']} reads back other bytes"
        )
    messages = await history(host) if stored[0]["in_history"] else None
    if messages is not None:
        seq = stored[0]["history_seq"]
        found = [m["text"] for m in messages if m["message_seq"] == seq]
        host.expect(
            found == [envelope["text"]], f"{what}: the history holds {found} at {seq}, not the input's text"
        )


@USERHOST.case("restart.acknowledged-write-kept")
async def kill_after_send(host: HostSession) -> None:
    """agents.send of an input with an attachment, then of one without: the moment each one's receipt
    arrives, the host is killed (SIGKILL) and started again on the same home. Each time the main session is
    the same, agents.receipts has the receipt, a retry (the same request ID) answers replayed true with it,
    the attachment reads back byte for byte, and the history holds the input's text."""
    main = await open_main(host)
    kept = attachment(KEPT_FILE, "kept.bin", "application/octet-stream")
    inputs = [
        (user_input("acknowledged, then killed", [kept]), [KEPT_FILE]),
        (user_input("acknowledged without a file, then killed"), []),
    ]
    for envelope, contents in inputs:
        sent = await send_input(host, envelope)
        await host.kill()
        host.expect(sent["replayed"] is False, "a new submission answered replayed true")
        await host.restart()
        again = await open_main(host)
        host.expect(again == main, f"after a kill and a start the main session is {again!r}, not {main!r}")
        what = f"after a kill right after its receipt, the input {envelope['text']!r}"
        await expect_kept(host, main, envelope, sent["receipt"], contents, what)


@USERHOST.case("restart.same-main-session")
async def main_session_kept(host: HostSession) -> None:
    """Stopped (EOF on every client, then SIGTERM) and started again on the same home, the host names the
    same main session, on its stdio and on a socket client, and the input sent before the stop is still
    there: its receipt, a retry that replays it, its message in the history."""
    main = await open_main(host)
    envelope = user_input("sent before the restart")
    sent = await send_input(host, envelope)
    await host.stop()
    await host.restart()
    again = await open_main(host)
    host.expect(
        again == main, f"after a restart on the same home the main session is {again!r}, not {main!r}"
    )
    if host.has_socket:
        other = await host.main_session(on=await host.client())
        host.expect(
            other == main, f"after a restart a socket client's main session is {other!r}, not {main!r}"
        )
    await expect_kept(host, main, envelope, sent["receipt"], [], "after a restart, the input sent before it")
