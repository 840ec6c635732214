"""Builders and calls for the Personal cases (spec/schema/userhost/personal.schema.json): `user_input`
envelopes and their attachments (canonical base64, SHA-256, sizes), submissions, receipt reads and attachment
chunk reads.

    main = await open_main(host)           # initialize, skip without wuu.personal, the main session
    receipt = await send(host, "hello")    # one admitted input's receipt
    refused = user_input("x" * 64_001)
    await send_error(host, refused, "invalid_params", field="user_input.text")
    await expect_not_admitted(host, refused)
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import random
from collections.abc import Mapping, Sequence
from typing import Any

from wuu.generated.catalog import USERHOST_ATTACHMENT_READ_DEFAULT_CHARS

from .connection import Connection, Message
from .session import HostSession

_numbers = itertools.count(1)
ATTACHMENT_READ = "host.session.attachment.read"
HISTORY_READ = "agents.history.read"
SEARCH = "agents.history.search"
SEND = "agents.send"
HISTORY_PAGE = 100
"""The largest `page_size` of `agents.history.read`."""


def sha256_hex(data: bytes) -> str:
    """Lowercase hexadecimal SHA-256, as the spec writes digests."""
    return hashlib.sha256(data).hexdigest()


def b64(data: bytes) -> str:
    """Standard base64 with padding: the one canonical encoding of `data`."""
    return base64.b64encode(data).decode("ascii")


def total_chars(size: int) -> int:
    """The length of the base64 encoding of `size` bytes: 4 * ceil(size / 3)."""
    return 4 * -(-size // 3)


def content(size: int, seed: int = 0) -> bytes:
    """`size` deterministic pseudorandom bytes (every byte value occurs, so every base64 character)."""
    return random.Random(seed).randbytes(size)


def attachment(
    raw: bytes, /, filename: str = "note.txt", media_type: str = "text/plain", **overrides: Any
) -> dict[str, Any]:
    """One `UserInputAttachment` of the bytes `raw` with their true size and digest; `overrides` replace
    fields (`data="c2Vj===="` makes a faulty one)."""
    built: dict[str, Any] = {
        "filename": filename,
        "media_type": media_type,
        "size": len(raw),
        "sha256": sha256_hex(raw),
        "data": b64(raw),
    }
    built.update(overrides)
    return built


def user_input(
    text: str = "hello",
    attachments: Sequence[Mapping[str, Any]] | None = None,
    *,
    client_input_id: str | None = None,
    request_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A `UserInput` envelope with fresh IDs (unless given); `attachments` is left out when None and `extra`
    adds fields as they are (also ones the spec does not have)."""
    number = next(_numbers)
    envelope: dict[str, Any] = {
        "client_input_id": client_input_id or f"conformance-input-{number}",
        "request_id": request_id or f"conformance-request-{number}",
        "text": text,
    }
    if attachments is not None:
        envelope["attachments"] = [dict(a) for a in attachments]
    envelope.update(extra)
    return envelope


async def open_main(host: HostSession) -> str:
    """Initialize the first client, skip unless the host serves wuu.personal, and return the main session."""
    await host.initialize()
    host.personal()
    return await host.main_session()


async def _session(host: HostSession, session_id: str | None, on: Connection | None) -> str:
    return session_id if session_id is not None else await host.main_session(on=on)


async def submit(
    host: HostSession,
    envelope: Mapping[str, Any],
    *,
    session_id: str | None = None,
    on: Connection | None = None,
) -> Message:
    """The checked response of `agents.send` of `envelope` (to the main session unless another is given)."""
    params = {"session_id": await _session(host, session_id, on)}
    return await host.call(SEND, params, user_input=envelope, on=on)


async def send_input(
    host: HostSession,
    envelope: Mapping[str, Any],
    *,
    session_id: str | None = None,
    on: Connection | None = None,
) -> dict[str, Any]:
    """The `AgentsSendResult` of a submission that must succeed (skips when the host serves no
    agents.send)."""
    message = await submit(host, envelope, session_id=session_id, on=on)
    if host.unserved(SEND, message):
        host.needs(SEND)
    host.without_receipts(message)
    host.expect("result" in message, f"agents.send failed: {message.get('error')}")
    result: dict[str, Any] = message["result"]["result"]
    return result


async def send(
    host: HostSession,
    text: str = "hello",
    attachments: Sequence[Mapping[str, Any]] | None = None,
    *,
    on: Connection | None = None,
) -> dict[str, Any]:
    """Submit a fresh input to the main session; its receipt (the submission must be new: not replayed)."""
    sent = await send_input(host, user_input(text, attachments), on=on)
    host.expect(sent["replayed"] is False, "a new submission's agents.send answered replayed true")
    receipt: dict[str, Any] = sent["receipt"]
    return receipt


async def send_error(
    host: HostSession,
    envelope: Mapping[str, Any],
    code: str,
    *,
    field: str | None = None,
    session_id: str | None = None,
    on: Connection | None = None,
) -> Message:
    """The error response of a submission that must fail with `code` (naming `field`, when given)."""
    message = await submit(host, envelope, session_id=session_id, on=on)
    if code != "unsupported_method" and host.unserved(SEND, message):
        host.needs(SEND)
    if code != "input_receipts_unavailable":
        host.without_receipts(message)
    host.expect_error(message, code, SEND, field)
    return message


async def receipts(
    host: HostSession, *client_input_ids: str, on: Connection | None = None
) -> list[dict[str, Any]]:
    """The main session's receipts of these client input IDs (`agents.receipts`), as returned."""
    params = {"session_id": await host.main_session(on=on), "client_input_ids": list(client_input_ids)}
    found: list[dict[str, Any]] = (await host.call_ok("agents.receipts", params, on=on))["receipts"]
    return found


async def history(host: HostSession, *, on: Connection | None = None) -> list[dict[str, Any]] | None:
    """The newest page of the main conversation (`agents.history.read`, 100 messages), newest first; None
    when the host does not serve that optional method (the caller observes what it can another way)."""
    params = {"session_id": await host.main_session(on=on), "page_size": HISTORY_PAGE}
    message = await host.call(HISTORY_READ, params, on=on)
    if host.unserved(HISTORY_READ, message):
        return None
    host.expect("result" in message, f"{HISTORY_READ} failed: {message.get('error')}")
    messages: list[dict[str, Any]] = message["result"]["result"]["messages"]
    return messages


async def search_for(host: HostSession, text: str) -> list[dict[str, Any]] | None:
    """The messages `agents.history.search` finds for `text` (its first 1,024 characters), newest first; None
    when the text is empty or the host does not serve that optional method. How text matches is the
    provider's: a message it does not find may still be there."""
    if not text:
        return None
    params = {"session_id": await host.main_session(), "query": text[:1024], "page_size": HISTORY_PAGE}
    message = await host.call(SEARCH, params)
    if host.unserved(SEARCH, message):
        return None
    host.expect("result" in message, f"{SEARCH} failed: {message.get('error')}")
    messages: list[dict[str, Any]] = message["result"]["result"]["messages"]
    return messages


async def expect_not_admitted(host: HostSession, envelope: Mapping[str, Any], what: str = "") -> None:
    """Fail unless the input was not admitted: no receipt of its client input ID and no user message of its
    text in the history, or (without agents.history.read) among what a search for it finds (give refused
    inputs a text no other input of the case has)."""
    about = what or f"the refused input {envelope['client_input_id']}"
    found = await receipts(host, envelope["client_input_id"])
    host.expect(found == [], f"{about} was not admitted, yet agents.receipts has its receipt: {found}")
    messages = await history(host)
    if messages is None:
        messages = await search_for(host, envelope["text"])
    texts = [m["text"] for m in messages or [] if m["role"] == "user"]
    host.expect(envelope["text"] not in texts, f"{about} was refused, yet its text is in the history")


async def read_attachment(
    host: HostSession, session_id: str, attachment_id: str, offset: int, max_chars: int | None = None
) -> Message:
    """The checked response of one `host.session.attachment.read` (`max_chars` left out when None)."""
    params: dict[str, Any] = {"session_id": session_id, "attachment_id": attachment_id, "offset": offset}
    if max_chars is not None:
        params["max_chars"] = max_chars
    return await host.call(ATTACHMENT_READ, params)


async def read_chunk(
    host: HostSession, session_id: str, attachment_id: str, offset: int, max_chars: int | None = None
) -> dict[str, Any]:
    """The `HostSessionAttachmentReadResult` of a chunk read that must succeed."""
    message = await read_attachment(host, session_id, attachment_id, offset, max_chars)
    if host.unserved(ATTACHMENT_READ, message):
        host.needs(ATTACHMENT_READ)
    host.expect("result" in message, f"{ATTACHMENT_READ} failed: {message.get('error')}")
    result: dict[str, Any] = message["result"]["result"]
    return result


async def reassemble(
    host: HostSession, session_id: str, metadata: Mapping[str, Any], max_chars: int | None = None
) -> str:
    """Read an attachment chunk by chunk from offset 0, checking every chunk against the spec's rules; the
    concatenated base64 characters."""
    most = USERHOST_ATTACHMENT_READ_DEFAULT_CHARS if max_chars is None else max_chars
    total = total_chars(metadata["size"])
    parts: list[str] = []
    offset = 0
    while True:
        chunk = await read_chunk(host, session_id, metadata["attachment_id"], offset, max_chars)
        where = f"the chunk at offset {offset} of {metadata['attachment_id']}"
        host.expect(
            chunk["attachment"] == dict(metadata), f"{where} names other metadata: {chunk['attachment']}"
        )
        host.expect(chunk["offset"] == offset, f"{where} says offset {chunk['offset']}")
        host.expect(
            chunk["total_chars"] == total, f"{where} says total_chars {chunk['total_chars']}, not {total}"
        )
        data = chunk["data"]
        host.expect(len(data) <= most, f"{where} has {len(data)} characters, over max_chars {most}")
        host.expect(len(data) % 4 == 0, f"{where} has {len(data)} characters: it does not decode on its own")
        host.expect(
            chunk["next_offset"] == offset + len(data), f"{where}: next_offset is not offset + len(data)"
        )
        host.expect(
            chunk["eof"] == (chunk["next_offset"] == total), f"{where}: eof is {chunk['eof']} at {offset}"
        )
        parts.append(data)
        if chunk["eof"]:
            host.expect(
                chunk["final_sha256"] == metadata["sha256"],
                f"{where} ends the content; its final_sha256 is {chunk['final_sha256']}, not the digest",
            )
            return "".join(parts)
        host.expect(chunk["final_sha256"] is None, f"{where} is not the last; its final_sha256 is not null")
        host.expect(data != "", f"{where} is not the last, yet it is empty")
        offset = chunk["next_offset"]
