"""Attachment bytes in the space's files folder (`files/attachments/<attachment_id>`).

Admission checks every attachment against its declared size and digest, then writes its bytes durably (the
file and its directory synced) before the receipt that names it is committed, so an acknowledged receipt
never points at bytes that a crash could lose. Reading serves the content as base64 in chunks addressed by
base64 characters: a chunk starting at a multiple of 4 decodes on its own.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.models import UserHostErrorCode, UserInputAttachment

from ..errors import UserHostError
from ..private import create_file, make_directories
from .provider import StagedAttachment

FOLDER = "attachments"
INCOMING = ".incoming"
"""Where bytes are written before they are renamed into place. What a crash leaves there, and bytes renamed
into place whose admission a crash cut short (no receipt names them), are removed when the host starts: only
by the host that holds the space's presence lock, so never while another host may be admitting them."""


@dataclass(frozen=True)
class DecodedAttachment:
    """An attachment whose content matched its declared size and digest."""

    filename: str
    media_type: str
    sha256: str
    content: bytes


def decode(attachments: Sequence[UserInputAttachment]) -> list[DecodedAttachment]:
    """Decode and check each attachment; `invalid_params` naming the first attachment whose base64, size or
    digest is wrong (`user_input.attachments.N.data`, `.size` or `.sha256`)."""
    decoded = []
    for index, attachment in enumerate(attachments):
        where = f"user_input.attachments.{index}"
        try:
            content = base64.b64decode(attachment.data, validate=True)
            # Strict: the one canonical encoding of the bytes (Python's decoder ignores excess padding).
            if base64.b64encode(content) != attachment.data.encode("ascii"):
                raise ValueError("not the canonical encoding")
        except (binascii.Error, ValueError):
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS,
                f"attachment {index} is not standard base64",
                f"{where}.data",
            ) from None
        if len(content) != attachment.size:
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS,
                f"attachment {index} decodes to {len(content)} bytes, not its size {attachment.size}",
                f"{where}.size",
            )
        if hashlib.sha256(content).hexdigest() != attachment.sha256:
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS,
                f"attachment {index} ({attachment.filename}) does not have the SHA-256 it declares",
                f"{where}.sha256",
            )
        decoded.append(
            DecodedAttachment(attachment.filename, attachment.media_type, attachment.sha256, content)
        )
    return decoded


class AttachmentFiles:
    """The attachment files of one space. Build it only under the space's presence lock: it removes what a
    crash left in the staging folder."""

    def __init__(self, files: Path) -> None:
        self.folder = files / FOLDER
        self._incoming = self.folder / INCOMING
        make_directories(self._incoming)
        for leftover in self._incoming.iterdir():
            leftover.unlink(missing_ok=True)

    def stage(self, attachments: Sequence[DecodedAttachment]) -> list[StagedAttachment]:
        """Write the bytes durably under fresh attachment IDs (blocking: run it in a thread)."""
        staged = []
        try:
            for attachment in attachments:
                attachment_id = f"att_{secrets.token_hex(12)}"
                path = self.folder / attachment_id
                part = self._incoming / attachment_id
                with open(create_file(part), "wb") as file:
                    file.write(attachment.content)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(part, path)
                staged.append(
                    StagedAttachment(
                        attachment_id,
                        attachment.filename,
                        attachment.media_type,
                        len(attachment.content),
                        attachment.sha256,
                        path,
                    )
                )
            if staged:
                _sync_directory(self.folder)
        except BaseException:
            self.discard(staged)
            raise
        return staged

    def stored(self) -> list[str]:
        """The attachment IDs whose bytes are in the folder."""
        return sorted(path.name for path in self.folder.iterdir() if path.is_file())

    def remove(self, attachment_ids: Sequence[str]) -> None:
        """Remove the bytes of these attachments (staged by an admission that a crash cut short)."""
        for attachment_id in attachment_ids:
            with contextlib.suppress(OSError):
                (self.folder / attachment_id).unlink()

    @staticmethod
    def discard(staged: Sequence[StagedAttachment]) -> None:
        """Remove staged bytes that no receipt came to name."""
        for attachment in staged:
            with contextlib.suppress(OSError):
                attachment.path.unlink()


def read_chunk(path: Path, offset_chars: int, max_chars: int) -> tuple[str, int]:
    """The base64 characters of the file's content from `offset_chars` (a multiple of 4), at most
    `max_chars` (a multiple of 4) of them, and the length of the whole encoding (blocking)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        file.seek(offset_chars // 4 * 3)
        data = file.read(max_chars // 4 * 3)
    return base64.b64encode(data).decode("ascii"), encoded_length(size)


def encoded_length(size: int) -> int:
    """The number of base64 characters (with padding) of `size` bytes."""
    return 4 * ((size + 2) // 3)


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file's bytes as read now (blocking)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _sync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
