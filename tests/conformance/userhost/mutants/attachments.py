"""Mutants of attachments: the declared digest and size, the canonical base64, chunk reads, ownership."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import Mapping
from typing import Any

from wuu.generated.models import HostSessionAttachmentReadResult, UserInputAttachment
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.plugins import PluginCall, PluginHandler

from . import mutant
from .harness import (
    CallWith,
    Message,
    main_session,
    rewrite_plugin_params,
    rewrite_result,
    wrap_method,
    wrap_methods,
)


def _decoded(attachment: UserInputAttachment) -> bytes | None:
    try:
        return base64.b64decode(attachment.data, validate=True)
    except binascii.Error:
        return None


@mutant(
    "attachment-digest-unchecked",
    "admits an attachment whose bytes do not have its declared SHA-256",
    "attachments.digest-checked",
)
def attachment_digest_unchecked() -> Composer:
    """The `agents.send` handler sees each attachment with the digest of its actual bytes in place of the
    declared one, so a wrong digest is never noticed."""

    def make(handler: PluginHandler) -> PluginHandler:
        async def send(params: Any, call: PluginCall) -> WireModel:
            envelope = call.user_input
            if envelope is None or not envelope.attachments:
                return await handler(params, call)
            attachments = []
            for attachment in envelope.attachments:
                content = _decoded(attachment)
                digest = attachment.sha256 if content is None else hashlib.sha256(content).hexdigest()
                attachments.append(attachment.model_copy(update={"sha256": digest}))
            return await handler(
                params, CallWith(call, envelope.model_copy(update={"attachments": attachments}))
            )

        return send

    return wrap_method("agents.send", make)


def _true_sizes(params: Message, request: Message) -> None:
    envelope = request.get("user_input")
    attachments = envelope.get("attachments") if isinstance(envelope, dict) else None
    for attachment in attachments if isinstance(attachments, list) else []:
        if isinstance(attachment, dict) and isinstance(attachment.get("data"), str):
            with contextlib.suppress(binascii.Error):
                attachment["size"] = len(base64.b64decode(attachment["data"], validate=True))


mutant(
    "attachment-size-unchecked",
    "admits an attachment whose decoded data is not its declared size",
    "attachments.size-checked",
)(
    rewrite_plugin_params(
        "agents.send",
        _true_sizes,
        doc="Each attachment of an `agents.send` input declares the size of its actual bytes by the time the "
        "host sees it.",
    )
)


def _lenient(data: str) -> bytes | None:
    """What a lenient decoder makes of base64: URL-safe characters, whitespace and padding forgiven."""
    text = "".join(data.split()).replace("-", "+").replace("_", "/").rstrip("=").replace("=", "")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error:
        return None


def _canonical(params: Message, request: Message) -> None:
    envelope = request.get("user_input")
    attachments = envelope.get("attachments") if isinstance(envelope, dict) else None
    for attachment in attachments if isinstance(attachments, list) else []:
        if isinstance(attachment, dict) and isinstance(attachment.get("data"), str):
            content = _lenient(attachment["data"])
            if content is not None:
                attachment["data"] = base64.b64encode(content).decode("ascii")


mutant(
    "non-canonical-base64-accepted",
    "admits attachment data that is not the standard padded base64 of its bytes",
    "attachments.canonical-base64",
)(
    rewrite_plugin_params(
        "agents.send",
        _canonical,
        doc="Attachment data is decoded leniently (URL-safe characters, whitespace, missing, excess or inner "
        "padding and non-zero pad bits forgiven) and re-encoded canonically before the host sees it.",
    )
)


@mutant(
    "wrong-final-digest",
    "ends an attachment's last chunk with a final_sha256 that is not the content's digest",
    "attachments.chunk-read",
)
def wrong_final_digest() -> Composer:
    """The `host.session.attachment.read` handler's `final_sha256`, when it gives one, is the digest of no
    bytes."""
    empty = hashlib.sha256(b"").hexdigest()

    def change(result: HostSessionAttachmentReadResult, params: Any) -> WireModel:
        if result.final_sha256 is None:
            return result
        return result.model_copy(update={"final_sha256": empty})

    return rewrite_result("host.session.attachment.read", change)


@mutant(
    "foreign-session-attachment-served",
    "serves an attachment read under another session's ID as if it named the main session",
    "attachments.foreign-not-found",
)
def foreign_session_attachment_served() -> Composer:
    """`host.session.attachment.read` runs on the main session whatever session it names."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def read(params: Any, call: PluginCall) -> WireModel:
            return await handler(
                params.model_copy(update={"session_id": await main_session(methods, call)}), call
            )

        return read

    return wrap_methods(["host.session.attachment.read"], make)


def _aligned(params: Message, request: Message) -> None:
    if isinstance(params.get("offset"), int) and params["offset"] % 4:
        params["offset"] -= params["offset"] % 4


mutant(
    "unaligned-offset-rounded",
    "serves an attachment read at an offset that is not a multiple of 4, from the multiple below it",
    "attachments.offset-checked",
)(
    rewrite_plugin_params(
        "host.session.attachment.read",
        _aligned,
        doc="The `offset` of `host.session.attachment.read` is rounded down to a multiple of 4 before the host "
        "sees it.",
    )
)
