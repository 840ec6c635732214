"""The bearer tokens of a user space's HTTP clients (spec/schema/userhost/http.schema.json).

Each token names one paired client. The file `<home>/user-spaces/<space>/<domain>/state/http-tokens.json`
(mode 0600, replaced atomically) keeps only each token's name, SHA-256 digest and creation time: the token
itself is shown once, when it is created. A host reads the file again whenever it changes, so a token that
is created or revoked takes effect on the host's next request without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from wuu.generated import validators

from .authority import StorageLayout

TOKENS_FILE = "http-tokens.json"
TOKEN_PREFIX = "wuu_"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class TokenError(Exception):
    """A token command cannot be done (a name reused or unknown, a bad binding, an unreadable file)."""


@dataclass(frozen=True)
class TokenEntry:
    """One paired client: its name, its token's SHA-256 digest (hex) and when it was created."""

    name: str
    sha256: str
    created_at: str


def digest(token: str) -> str:
    """The SHA-256 digest of a token, as the file stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """The token file of one user space and product domain."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[TokenEntry] = []
        self._seen: tuple[int, int, int] | None = None

    @classmethod
    def of_space(cls, home: Path, user_space_id: str, product_domain: str) -> TokenStore:
        """The store of a space's state folder; TokenError when the binding is not a valid one."""
        properties = validators.bundle()["$defs"]["UserHostInitializeResult"]["properties"]
        for name, value in (("user_space_id", user_space_id), ("product_domain", product_domain)):
            if not re.fullmatch(properties[name]["pattern"], value):
                raise TokenError(f"{name} {value!r} is not valid")
        return cls(StorageLayout.under(home, user_space_id, product_domain).state / TOKENS_FILE)

    # --- the host's side -------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read the file again if it changed since the last read; whether it did. A missing file holds no
        tokens; one that is not a token file holds none either, and raises TokenError."""
        try:
            info = self.path.stat()
        except FileNotFoundError:
            changed = self._seen is not None
            self._entries, self._seen = [], None
            return changed
        seen = (info.st_ino, info.st_mtime_ns, info.st_size)
        if seen == self._seen:
            return False
        # A file that cannot be read holds no tokens (TokenError): every client is refused until it is fixed.
        self._entries, self._seen = [], seen
        self._entries = self._read()
        return True

    def authenticate(self, token: str) -> TokenEntry | None:
        """The entry of the client whose token this is, or None. Every entry's digest is compared in constant
        time, so the answer's timing tells nothing of which digest, or how much of one, matched."""
        given = digest(token).encode()
        found = None
        for entry in self._entries:
            if hmac.compare_digest(given, entry.sha256.encode()):
                found = entry
        return found

    def holds(self, sha256: str) -> bool:
        """Whether a token of this digest is still in the file, as last read."""
        return any(entry.sha256 == sha256 for entry in self._entries)

    # --- the token commands ----------------------------------------------------------------------

    def entries(self) -> list[TokenEntry]:
        """The tokens in the file, in the order they were created."""
        return self._read()

    def create(self, name: str) -> str:
        """Store a new token named `name` and return it (the only time it is shown)."""
        if not _NAME.fullmatch(name):
            raise TokenError(f"--name: {name!r} is not 1 to 64 letters, digits, '.', '_' or '-'")
        entries = self._read()
        if any(entry.name == name for entry in entries):
            raise TokenError(f"--name: a token named {name!r} exists; revoke it first or pick another name")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        created_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._write([*entries, TokenEntry(name, digest(token), created_at)])
        return token

    def revoke(self, name: str) -> None:
        """Remove the token named `name`; its client is refused from its next request on."""
        entries = self._read()
        kept = [entry for entry in entries if entry.name != name]
        if len(kept) == len(entries):
            raise TokenError(f"--name: no token named {name!r}")
        self._write(kept)

    def _read(self) -> list[TokenEntry]:
        try:
            document = json.loads(self.path.read_text())
            return [
                TokenEntry(item["name"], item["sha256"], item["created_at"]) for item in document["tokens"]
            ]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise TokenError(f"{self.path}: not a token file ({error})") from None

    def _write(self, entries: list[TokenEntry]) -> None:
        """Replace the file atomically; the new file is 0600 from its creation."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        document = {"tokens": [vars(entry) for entry in entries]}
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{TOKENS_FILE}.")
        try:
            with os.fdopen(handle, "w") as file:  # mkstemp creates the file 0600
                json.dump(document, file, indent=2)
                file.write("\n")
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def write_secret(path: Path, token: str) -> None:
    """Write a token to a new file created 0600 (`token create --out`); an existing file is refused."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, "w") as file:
        file.write(token + "\n")
