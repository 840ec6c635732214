"""Reading persisted attachments in bounded base64 chunks (spec/schema/userhost/personal.schema.json): for
clients (`host.session.attachment.read`) and, through adapters scoped to them, for the agents (the
`read_attachment` tool): the main agent reads the main conversation's attachments, a background task those of the
user input whose answer started it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from wuu.generated.models import HostSessionAttachmentReadResult, ReadAttachmentArguments

from .attachments import encoded_length, file_sha256, read_chunk
from .provider import SessionDomain, StoredAttachment

READ_ATTACHMENT = "read_attachment"
"""The agents' tool that reads an attachment in their scope (ReadAttachmentArguments)."""
AGENT_MAX_CHARS = 65536
"""The most base64 characters one `read_attachment` call returns when it names no `max_chars`."""


class OffsetPastEnd(Exception):
    """The chunk would start after the end of the encoded content."""


async def chunk(stored: StoredAttachment, offset: int, max_chars: int) -> HostSessionAttachmentReadResult:
    """The chunk of `stored` at `offset` (base64 characters), at most `max_chars` long. OffsetPastEnd."""
    total = encoded_length(stored.metadata.size)
    if offset > total:
        raise OffsetPastEnd(f"offset {offset} is past the content's {total} base64 characters")
    data, _ = await asyncio.to_thread(read_chunk, stored.path, offset, max_chars)
    next_offset = offset + len(data)
    eof = next_offset >= total
    final = await asyncio.to_thread(file_sha256, stored.path) if eof else None
    return HostSessionAttachmentReadResult(
        attachment=stored.metadata,
        offset=offset,
        data=data,
        next_offset=next_offset,
        total_chars=total,
        eof=eof,
        final_sha256=final,
    )


class AttachmentScope(Protocol):
    """The attachments one agent may read."""

    async def find(self, attachment_id: str) -> StoredAttachment | None:
        """The attachment, if it is in the scope."""


class AgentAttachments:
    """The main agent's adapter: the attachments of the main conversation."""

    def __init__(self, store: SessionDomain) -> None:
        self._store = store

    async def find(self, attachment_id: str) -> StoredAttachment | None:
        return await self._store.attachment(self._store.main_session_id, attachment_id)


class TaskAttachments:
    """A background task's adapter: the attachments of the input whose answer started it (none without one)."""

    def __init__(self, store: SessionDomain, origin_input: str | None) -> None:
        self._store = store
        self._origin = origin_input

    async def find(self, attachment_id: str) -> StoredAttachment | None:
        if self._origin is None:
            return None
        return await self._store.input_attachment(self._store.main_session_id, self._origin, attachment_id)


async def read_attachment(scope: AttachmentScope, arguments: Mapping[str, Any]) -> str:
    """The `read_attachment` tool: the chunk as JSON text, or the refusal the model is told."""
    try:
        wanted = ReadAttachmentArguments.model_validate(dict(arguments))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        return f"refused (invalid_action): {where}: {first['msg']}"
    stored = await scope.find(wanted.attachment_id)
    if stored is None:
        return f"refused (not_found): no attachment {wanted.attachment_id}"
    try:
        found = await chunk(stored, wanted.offset, wanted.max_chars or AGENT_MAX_CHARS)
    except OffsetPastEnd as past:
        return f"refused (invalid_params): offset: {past}"
    return found.model_dump_json()
