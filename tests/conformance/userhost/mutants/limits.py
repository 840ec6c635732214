"""Mutants of the Personal limits: text bytes, attachment count and bytes, chunk size, reads and pages."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from wuu.generated.catalog import (
    USERHOST_ATTACHMENT_READ_MAX_CHARS,
    USERHOST_HISTORY_SEARCH_MAX_PAGE_SIZE,
    USERHOST_MAX_REACTIONS_READ_MESSAGES,
    USERHOST_MAX_USER_INPUT_ATTACHMENT_BYTES,
    USERHOST_MAX_USER_INPUT_ATTACHMENTS,
    USERHOST_MAX_USER_INPUT_TEXT_BYTES,
)

from . import mutant
from .harness import Message, rewrite_plugin_params


def _user_input(request: Message) -> dict[str, Any] | None:
    found = request.get("user_input")
    return found if isinstance(found, dict) else None


def _truncate_text(params: Message, request: Message) -> None:
    envelope = _user_input(request)
    if envelope is not None and isinstance(envelope.get("text"), str):
        raw = envelope["text"].encode("utf-8")
        if len(raw) > USERHOST_MAX_USER_INPUT_TEXT_BYTES:
            envelope["text"] = raw[:USERHOST_MAX_USER_INPUT_TEXT_BYTES].decode("utf-8", "ignore")


mutant(
    "text-over-limit-truncated",
    "admits text over 64,000 UTF-8 bytes, cut to the limit, instead of refusing it",
    "limits.text-bytes",
)(
    rewrite_plugin_params(
        "agents.send",
        _truncate_text,
        doc="The text of an `agents.send` input over 64,000 UTF-8 bytes is cut to the characters that fit "
        "before the host sees it.",
    )
)


def _drop_extra_attachments(params: Message, request: Message) -> None:
    envelope = _user_input(request)
    if envelope is not None and isinstance(envelope.get("attachments"), list):
        del envelope["attachments"][USERHOST_MAX_USER_INPUT_ATTACHMENTS:]


mutant(
    "attachments-over-count-dropped",
    "admits an input with 17 attachments, leaving out those beyond 16, instead of refusing it",
    "limits.attachment-count",
)(
    rewrite_plugin_params(
        "agents.send",
        _drop_extra_attachments,
        doc="The attachments of an `agents.send` input beyond the 16th are dropped before the host sees it.",
    )
)


def _trim_attachment_bytes(params: Message, request: Message) -> None:
    envelope = _user_input(request)
    attachments = envelope.get("attachments") if envelope is not None else None
    if not isinstance(attachments, list):
        return
    sizes = [
        each["size"] for each in attachments if isinstance(each, dict) and isinstance(each.get("size"), int)
    ]
    if len(sizes) != len(attachments):
        return
    excess = sum(sizes) - USERHOST_MAX_USER_INPUT_ATTACHMENT_BYTES
    if excess <= 0 or not attachments or sizes[-1] < excess:
        return
    last = attachments[-1]
    kept = base64.b64decode(last["data"])[: sizes[-1] - excess]
    last.update(size=len(kept), sha256=hashlib.sha256(kept).hexdigest(), data=base64.b64encode(kept).decode())


mutant(
    "attachment-bytes-trimmed",
    "admits attachments over 20 MiB in total, cutting the last one to fit, instead of refusing them",
    "limits.attachment-bytes",
)(
    rewrite_plugin_params(
        "agents.send",
        _trim_attachment_bytes,
        doc="When an `agents.send` input's attachments declare more than 20,971,520 bytes in total, the last "
        "one is cut to fit (its size, digest and data made to match) before the host sees it.",
    )
)


def _clamp(name: str, most: int) -> Any:
    def clamp(params: Message, request: Message) -> None:
        if isinstance(params.get(name), int) and params[name] > most:
            params[name] = most

    return clamp


mutant(
    "read-chars-clamped",
    "serves host.session.attachment.read with max_chars over 1,048,576 instead of refusing it",
    "limits.attachment-read-chars",
)(
    rewrite_plugin_params(
        "host.session.attachment.read",
        _clamp("max_chars", USERHOST_ATTACHMENT_READ_MAX_CHARS),
        doc="`max_chars` over 1,048,576 is lowered to 1,048,576 before the host sees it.",
    )
)


mutant(
    "search-page-size-clamped",
    "serves agents.history.search with page_size over 100 instead of refusing it",
    "limits.search-page-size",
)(
    rewrite_plugin_params(
        "agents.history.search",
        _clamp("page_size", USERHOST_HISTORY_SEARCH_MAX_PAGE_SIZE),
        doc="`page_size` over 100 is lowered to 100 before the host sees it.",
    )
)


def _first_messages(params: Message, request: Message) -> None:
    if isinstance(params.get("message_seqs"), list):
        del params["message_seqs"][USERHOST_MAX_REACTIONS_READ_MESSAGES:]


mutant(
    "reactions-read-truncated",
    "answers agents.reactions of 101 messages with the first 100 instead of refusing it",
    "limits.reactions-messages",
)(
    rewrite_plugin_params(
        "agents.reactions",
        _first_messages,
        doc="The `message_seqs` of `agents.reactions` beyond the 100th are dropped before the host sees them.",
    )
)
