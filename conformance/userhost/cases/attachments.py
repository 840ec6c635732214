"""Cases of attachments: admission checks each one's digest, size and base64 against its content, and
`host.session.attachment.read` serves the stored bytes in base64 chunks of the owner's session only."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ..personal import (
    ATTACHMENT_READ,
    attachment,
    b64,
    content,
    expect_not_admitted,
    history,
    open_main,
    read_attachment,
    read_chunk,
    reassemble,
    send,
    send_error,
    send_input,
    sha256_hex,
    total_chars,
    user_input,
)
from ..session import HostSession
from ..suite import USERHOST

SECOND = "user_input.attachments.1"
"""Every refused input puts the faulty attachment second, after a valid one: the field names index 1."""


async def refused_then_admitted(
    host: HostSession, faulty: Mapping[str, Any], fields: tuple[str, ...], what: str
) -> None:
    """Send a valid attachment and `faulty`: invalid_params naming one of `fields`, nothing admitted; then the
    same IDs with the faulty attachment corrected are admitted as a new input (the refusal bound nothing)."""
    first = attachment(b"the valid first file", "first.txt")
    envelope = user_input(f"refused: {what}", [first, faulty])
    message = await send_error(host, envelope, "invalid_params")
    field = message["error"]["data"].get("field")
    host.expect(field in fields, f"{what}: the error names the field {field!r}, not one of {list(fields)}")
    await expect_not_admitted(host, envelope, f"an input with {what}")
    fixed = attachment(b"the second file", "second.txt")
    corrected = {**envelope, "attachments": [first, fixed]}
    sent = await send_input(host, corrected)
    host.expect(sent["replayed"] is False, f"after the refusal of {what}, the corrected input is a replay")


@USERHOST.case("attachments.digest-checked")
async def digest_checked(host: HostSession) -> None:
    """A second attachment declaring the SHA-256 of other bytes gets invalid_params naming its sha256 (or
    data) and is not admitted; corrected, the same input is admitted."""
    await open_main(host)
    wrong = attachment(b"the second file", "second.txt", sha256=sha256_hex(b"other bytes"))
    await refused_then_admitted(host, wrong, (f"{SECOND}.sha256", f"{SECOND}.data"), "a wrong digest")


@USERHOST.case("attachments.size-checked")
async def size_checked(host: HostSession) -> None:
    """A second attachment declaring one byte more, then one byte less, than its data decodes to gets
    invalid_params naming its size (or data) and is not admitted; corrected, the input is admitted."""
    await open_main(host)
    data = b"the second file"
    for delta in (1, -1):
        wrong = attachment(data, "second.txt", size=len(data) + delta)
        await refused_then_admitted(host, wrong, (f"{SECOND}.size", f"{SECOND}.data"), f"size {delta:+d}")


NOT_STANDARD = {
    "excess padding": "c2Vj====",
    "a stray pad": "c2Vj=",
    "missing padding": "c2Vjb25",
    "padding inside": "YQ==YQ==",
    "non-zero pad bits": "YR==",
    "URL-safe characters": "c2Vjb2-_",
    "other characters": "!!!!",
    "a newline": "c2Vjb25k\n",
    "a space": "c2Vj c25k",
}
"""Attachment data that is not the standard padded base64 of any bytes, by what is wrong with it."""


@USERHOST.case("attachments.canonical-base64")
async def canonical_base64(host: HostSession) -> None:
    """Data with excess, stray, missing or inner padding, non-zero pad bits, URL-safe or other characters,
    or whitespace (size and digest those of what a lenient decoder makes of it) gets invalid_params with
    field user_input.attachments.1.data and is not admitted."""
    await open_main(host)
    for what, data in NOT_STANDARD.items():
        try:
            lenient = base64.b64decode(data)
        except binascii.Error:
            lenient = b"undecodable"
        assert b64(lenient) != data
        bad = attachment(lenient, "second.txt", data=data)
        envelope = user_input(f"not standard base64: {what}", [attachment(b"first"), bad])
        await send_error(host, envelope, "invalid_params", field=f"{SECOND}.data")
        await expect_not_admitted(host, envelope, f"an attachment with {what}")


@USERHOST.case("attachments.chunk-read")
async def chunk_read(host: HostSession) -> None:
    """Attachments of 100,000, 0, 1 and 2 bytes read in chunks of 4,096 characters, of 4 and with the default
    chunk size chain by next_offset to eof with the final digest; the concatenation is the standard base64 of
    the bytes, and every chunk's metadata is the receipt's (and the history's)."""
    main = await open_main(host)
    contents = [content(100_000, 5), b"", b"\xfb", b"\xfb\xff"]
    files = [attachment(data, f"file-{n}.bin", "application/octet-stream") for n, data in enumerate(contents)]
    got = await send(host, "files to read back", files)
    messages = await history(host) if got["in_history"] else None
    if messages is not None:
        found = [m for m in messages if m["message_seq"] == got["history_seq"]]
        host.expect(
            found and found[0]["attachments"] == got["attachments"],
            "the history's attachment metadata is not the receipt's",
        )
    for data, metadata in zip(contents, got["attachments"], strict=True):
        sizes = (4096, None) if len(data) > 4096 else (4, None)
        for max_chars in sizes:
            joined = await reassemble(host, main, metadata, max_chars)
            host.expect(
                joined == b64(data),
                f"the chunks of {metadata['filename']} (max_chars {max_chars}) are not the base64 of its bytes",
            )
    middle = total_chars(len(contents[0])) // 2 // 4 * 4
    chunk = await read_chunk(host, main, got["attachments"][0]["attachment_id"], middle, 12)
    start = middle // 4 * 3
    host.expect(
        chunk["data"] == b64(contents[0][start : start + 9]),
        f"12 characters at offset {middle} are not the base64 of bytes {start} to {start + 9}",
    )


@USERHOST.case("attachments.offset-checked")
async def offset_checked(host: HostSession) -> None:
    """An offset at total_chars reads empty data with eof true and the final digest; total_chars + 4 and an
    offset that is not a multiple of 4 get invalid_params with field params.offset."""
    main = await open_main(host)
    data = content(1000, 6)
    metadata = (await send(host, "a file to read at its end", [attachment(data)]))["attachments"][0]
    total = total_chars(len(data))
    end = await read_chunk(host, main, metadata["attachment_id"], total)
    host.expect(
        (end["data"], end["next_offset"], end["eof"], end["final_sha256"])
        == ("", total, True, sha256_hex(data)),
        f"the read at total_chars {total} is not empty with eof and the final digest",
    )
    for offset in (total + 4, 2):
        message = await read_attachment(host, main, metadata["attachment_id"], offset)
        host.expect_error(message, "invalid_params", f"{ATTACHMENT_READ} at offset {offset}", "params.offset")


@USERHOST.case("attachments.foreign-not-found")
async def foreign_not_found(host: HostSession) -> None:
    """An unknown attachment ID in the main session, an existing attachment under another session's ID, and
    an unknown attachment of an unknown session get not_found."""
    main = await open_main(host)
    metadata = (await send(host, "a file of the main session", [attachment(b"mine")]))["attachments"][0]
    other = "conformance-not-the-main-session"
    for session_id, attachment_id in [
        (main, "conformance-unknown-attachment"),
        (other, metadata["attachment_id"]),
        (other, "conformance-unknown-attachment"),
    ]:
        message = await read_attachment(host, session_id, attachment_id, 0)
        what = f"{ATTACHMENT_READ} of {attachment_id} in {session_id}"
        host.expect_error(message, "not_found", what)
    await read_chunk(host, main, metadata["attachment_id"], 0)  # the attachment itself is readable
