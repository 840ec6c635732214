"""Cases of the Personal limits (spec/methods/userhost.json constants), each at the boundary and one past it:
text bytes, attachment count and total bytes, attachment chunk size, reactions read and search page size."""

from __future__ import annotations

from wuu.generated.catalog import (
    USERHOST_ATTACHMENT_READ_MAX_CHARS,
    USERHOST_HISTORY_SEARCH_MAX_PAGE_SIZE,
    USERHOST_MAX_REACTIONS_READ_MESSAGES,
    USERHOST_MAX_USER_INPUT_ATTACHMENT_BYTES,
    USERHOST_MAX_USER_INPUT_ATTACHMENTS,
    USERHOST_MAX_USER_INPUT_TEXT_BYTES,
)

from ..personal import (
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
    sha256_hex,
    total_chars,
    user_input,
)
from ..session import HostSession
from ..suite import USERHOST


@USERHOST.case("limits.text-bytes")
async def text_bytes(host: HostSession) -> None:
    """Text of 64,000 UTF-8 bytes in 21,334 characters is admitted unchanged; 64,001 bytes in 16,001
    characters, and 64,001 ASCII characters, get invalid_params with field user_input.text and are not
    admitted."""
    await open_main(host)
    most = USERHOST_MAX_USER_INPUT_TEXT_BYTES
    at_limit = "€" * (most // 3) + "a" * (most % 3)  # 3-byte characters
    assert len(at_limit.encode("utf-8")) == most
    got = await send(host, at_limit)
    host.expect(
        got["text_sha256"] == sha256_hex(at_limit.encode("utf-8")), "the text_sha256 is not the text's"
    )
    messages = await history(host)
    if messages is not None:
        texts = [m["text"] for m in messages if m["role"] == "user"]
        host.expect(texts == [at_limit], "the history does not hold the 64,000-byte text exactly")
    for over in ("😀" * (most // 4) + "b", "c" * (most + 1)):
        assert len(over.encode("utf-8")) == most + 1
        envelope = user_input(over)
        await send_error(host, envelope, "invalid_params", field="user_input.text")
        await expect_not_admitted(host, envelope, f"a text of {most + 1} bytes in {len(over)} characters")


@USERHOST.case("limits.attachment-count")
async def attachment_count(host: HostSession) -> None:
    """16 attachments are admitted in submitted order; 17 get invalid_params with field
    user_input.attachments and are not admitted."""
    await open_main(host)
    most = USERHOST_MAX_USER_INPUT_ATTACHMENTS
    files = [attachment(f"part {n}".encode(), f"part-{n}.txt") for n in range(most + 1)]
    envelope = user_input(f"{most + 1} attachments", files)
    await send_error(host, envelope, "invalid_params", field="user_input.attachments")
    await expect_not_admitted(host, envelope, f"an input with {most + 1} attachments")
    got = await send(host, f"{most} attachments", files[:most])
    names = [a["filename"] for a in got["attachments"]]
    host.expect(names == [f"part-{n}.txt" for n in range(most)], f"the receipt binds the attachments {names}")


@USERHOST.case("limits.attachment-bytes")
async def attachment_bytes(host: HostSession) -> None:
    """Two attachments of 20,971,521 bytes in total get invalid_params with field user_input.attachments
    and are not admitted; two of exactly 20,971,520 bytes are admitted, and the last chunk of the second
    ends the content with its digest."""
    main = await open_main(host)
    most = USERHOST_MAX_USER_INPUT_ATTACHMENT_BYTES
    half = content(most // 2, 7)
    rest = content(most - most // 2 + 1, 8)
    over = user_input("one byte over 20 MiB", [attachment(half, "a.bin"), attachment(rest, "b.bin")])
    await send_error(host, over, "invalid_params", field="user_input.attachments")
    await expect_not_admitted(host, over, "an input of 20 MiB and one byte")
    rest = rest[:-1]
    got = await send(host, "exactly 20 MiB", [attachment(half, "a.bin"), attachment(rest, "b.bin")])
    sizes = [a["size"] for a in got["attachments"]]
    host.expect(sizes == [len(half), len(rest)], f"the receipt binds the sizes {sizes}")
    second = got["attachments"][1]
    host.expect(second["sha256"] == sha256_hex(rest), "the receipt binds another digest of the second file")
    tail = total_chars(len(rest)) - 8
    last = await read_chunk(host, main, second["attachment_id"], tail)
    host.expect(
        last["data"] == b64(rest[tail // 4 * 3 :]), "the last 8 characters are not those of the bytes"
    )
    host.expect(last["eof"] is True and last["final_sha256"] == sha256_hex(rest), "the last chunk is wrong")


@USERHOST.case("limits.attachment-read-chars")
async def attachment_read_chars(host: HostSession) -> None:
    """An attachment of 1 MiB read with max_chars 1,048,576 and with max_chars omitted comes in chunks of at
    most 1,048,576 and 262,144 characters that make its base64; max_chars 1,048,577 and 1,048,580 get
    invalid_params with field params.max_chars."""
    main = await open_main(host)
    data = content(1 << 20, 3)
    got = await send(host, "a megabyte", [attachment(data, "mega.bin", "application/octet-stream")])
    metadata = got["attachments"][0]
    most = USERHOST_ATTACHMENT_READ_MAX_CHARS
    encoded = b64(data)
    host.expect(
        await reassemble(host, main, metadata, most) == encoded, "chunks of max_chars 1,048,576 differ"
    )
    host.expect(await reassemble(host, main, metadata) == encoded, "chunks of the default max_chars differ")
    for over in (most + 1, most + 4):
        message = await read_attachment(host, main, metadata["attachment_id"], 0, over)
        host.expect_error(message, "invalid_params", f"max_chars {over}", "params.max_chars")


@USERHOST.case("limits.reactions-messages")
async def reactions_messages(host: HostSession) -> None:
    """agents.reactions of 100 sequences answers only saved messages, in request order; 101 sequences get
    invalid_params with field params.message_seqs."""
    main = await open_main(host)
    got = await send(host, "a message to read reactions of")
    most = USERHOST_MAX_REACTIONS_READ_MESSAGES
    asked = list(range(most, 0, -1))
    found = await host.call_ok("agents.reactions", {"session_id": main, "message_seqs": asked})
    seqs = [m["message_seq"] for m in found["messages"]]
    host.expect(
        seqs == [s for s in asked if s in seqs], f"agents.reactions of 100 answered {seqs}, out of order"
    )
    # Read after: the agent may save a reply meanwhile, and a saved message is never removed.
    messages = await history(host)
    if messages is not None:
        saved = {m["message_seq"] for m in messages}
        host.expect(set(seqs) <= saved, f"agents.reactions answered sequences {seqs}; only {saved} are saved")
    if got["in_history"]:
        host.expect(got["history_seq"] in seqs, "agents.reactions of 100 left out the saved input")
    params = {"session_id": main, "message_seqs": list(range(1, most + 2))}
    await host.call_error("agents.reactions", params, "invalid_params", field="params.message_seqs")


@USERHOST.case("limits.search-page-size")
async def search_page_size(host: HostSession) -> None:
    """agents.history.search with page_size 100 finds the one matching input; page_size 101 gets
    invalid_params with field params.page_size."""
    main = await open_main(host)
    got = await send(host, "the needle of the page size case")
    most = USERHOST_HISTORY_SEARCH_MAX_PAGE_SIZE
    params = {"session_id": main, "query": "needle of the page", "page_size": most}
    found = await host.call_ok("agents.history.search", params)
    user = [m["message_seq"] for m in found["messages"] if m["role"] == "user"]
    expected = [got["history_seq"]] if got["in_history"] else []
    host.expect(user == expected, f"the search found the user messages {user}, not {expected}")
    await host.call_error(
        "agents.history.search", {**params, "page_size": most + 1}, "invalid_params", field="params.page_size"
    )
