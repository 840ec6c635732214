"""The page tokens of `agents.history.search`, opaque to clients and authenticated by the host
(spec/schema/userhost/personal.schema.json `AgentsHistorySearchParams.page_token`).

A token is the base64url text (unpadded) of the next page's cursor (its `before_seq`, 8 bytes big-endian)
followed by the HMAC-SHA-256 of the token's scope and that cursor under the space's page-token key: 32 random
bytes in `<state>/page-tokens.key`, created 0600 on first use and kept, so tokens outlive a restart of the
host. A token is taken back only in its own canonical spelling, with its exact MAC, for its own scope, and
with a cursor that is a history sequence (1 to 2^63 - 1); anything else is `invalid_params` naming
`params.page_token`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

import orjson

from wuu.generated.models import UserHostErrorCode

from ..errors import UserHostError
from ..private import create_file
from .sqlite.sessions import StoreError

KEY_FILE = "page-tokens.key"
KEY_BYTES = 32
CURSOR_BYTES = 8
MAC_BYTES = hashlib.sha256().digest_size
MAX_SEQ = 2**63 - 1
"""The largest history sequence (SQLite's largest integer)."""

Scope = Sequence[str | None]
"""What a token is valid for: the method and every request field that selects its pages."""


class PageTokens:
    """Issues and checks the page tokens of one user space."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def of_state(cls, state: Path) -> PageTokens:
        """The tokens under the key of this state folder, creating the key on first use. StoreError when
        the key file is not a key (remove it: the next start creates a new one, and tokens issued under
        the old key get `invalid_params`)."""
        path = state / KEY_FILE
        if not path.exists():
            _create(path)
        key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise StoreError(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte page-token key")
        return cls(key)

    def issue(self, scope: Scope, before_seq: int) -> str:
        """The token of the page that ends before `before_seq`, valid only for `scope`."""
        cursor = before_seq.to_bytes(CURSOR_BYTES, "big")
        raw = cursor + self._mac(scope, cursor)
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def cursor(self, token: str, scope: Scope) -> int:
        """The `before_seq` a token of this scope carries; UserHostError `invalid_params` naming
        `params.page_token` for any other text."""
        raw = _decode(token)
        if raw is not None and len(raw) == CURSOR_BYTES + MAC_BYTES:
            cursor, mac = raw[:CURSOR_BYTES], raw[CURSOR_BYTES:]
            before = int.from_bytes(cursor, "big")
            # The range is checked even under a valid MAC: only a history sequence may reach the store.
            if hmac.compare_digest(mac, self._mac(scope, cursor)) and 1 <= before <= MAX_SEQ:
                return before
        raise UserHostError(
            UserHostErrorCode.INVALID_PARAMS,
            "page_token is not a next_page_token of this search (same session, query and bounds)",
            "params.page_token",
        )

    def _mac(self, scope: Scope, cursor: bytes) -> bytes:
        # A JSON array ends where it ends, so the scope and the fixed-size cursor cannot run into each other.
        return hmac.new(self._key, orjson.dumps(list(scope)) + cursor, hashlib.sha256).digest()


def _decode(token: str) -> bytes | None:
    """The bytes of a token in its canonical unpadded base64url spelling, else None (so no two spellings
    name one token)."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") == token else None


def _create(path: Path) -> None:
    """Write a new key, durably and 0600 from its creation; a key another host created first is kept."""
    temporary = path.parent / f".{KEY_FILE}.{secrets.token_hex(8)}"
    try:
        with os.fdopen(create_file(temporary), "wb") as file:
            file.write(secrets.token_bytes(KEY_BYTES))
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)  # never replaces: every host of the space uses the first key
    finally:
        temporary.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
