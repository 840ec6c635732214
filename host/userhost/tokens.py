"""The bearer tokens of a user space's HTTP clients (spec/schema/userhost/http.schema.json).

Each token names one paired client. A token created for a device (`token create --device ID`) authenticates
that device: its transports are device-bound (spec/schema/userhost/push.schema.json), and revoking it ends the
device's authority. The file `<home>/user-spaces/<space>/<domain>/state/http-tokens.json` (mode 0600) keeps
only each token's name, device, SHA-256 digest and creation time: the token itself is shown once, when it is
created. Token commands may run at the same time: each change is one read-modify-write done while
holding a lock on `http-tokens.json.lock` beside the file, and replaces the file atomically and durably, so
no change is lost and a token is shown only once the file that holds it is on disk. A host reads the file
again (without the lock: a replaced file is always whole) whenever its content changes, so a token that is
created or revoked takes effect on the host's next request without a restart.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from wuu.generated import validators

from .private import FILE_MODE, make_directories
from .storage.layout import StorageLayout

TOKENS_FILE = "http-tokens.json"
LOCK_SUFFIX = ".lock"
TOKEN_PREFIX = "wuu_"
LOCK_SECONDS = 10.0
"""How long a token command waits for the lock before it gives up."""
_LOCK_POLL_SECONDS = 0.005
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class TokenError(Exception):
    """A token command cannot be done (a name reused or unknown, a bad binding, an unreadable file, the lock
    held too long)."""


@dataclass(frozen=True)
class TokenEntry:
    """One paired client: its name, its token's SHA-256 digest (hex), when it was created, and the device it
    authenticates (None for a token created without one)."""

    name: str
    sha256: str
    created_at: str
    device_id: str | None = None


def digest(token: str) -> str:
    """The SHA-256 digest of a token, as the file stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """The token file of one user space and product domain."""

    def __init__(self, path: Path, *, lock_seconds: float = LOCK_SECONDS) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + LOCK_SUFFIX)
        self.lock_seconds = lock_seconds
        self._entries: list[TokenEntry] = []
        self._seen: bytes | None = None
        self._stamp: tuple[int, ...] | None = None
        self._spare: int | None = None
        """A descriptor held in reserve for reading a changed file while the process has none free (opened
        by `keep_spare`, for the hosts that serve with the store)."""

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
        """Read the file again if it may have changed; whether its content changed since the last read. A
        missing file holds no tokens; one that cannot be read or is not a token file holds none either, and
        raises TokenError.

        The file is read only when its status (device, inode, size, modification and change times) differs
        from the last read's, so that an unchanged file costs no descriptor: a host out of descriptors still
        authenticates its clients. A changed file is read through a descriptor the store keeps in reserve
        (see `_spare`), so a host out of descriptors still sees a revocation; if even that fails, every token
        is refused until the file can be read. The content is compared, not the status alone: two
        replacements within one timestamp tick can leave the same inode, times and size (the inode a rename
        freed is reused), and a change missed that way would keep a revoked token.
        """
        try:
            info: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            info = None
        except OSError as error:
            self._entries, self._seen, self._stamp = [], None, None
            raise TokenError(f"{self.path}: cannot be read ({error.strerror})") from None
        stamp = (
            None
            if info is None
            else (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        )
        if stamp is not None and stamp == self._stamp:
            return False
        try:
            content = None if info is None else self._read_spared()
        except FileNotFoundError:
            content = None
        except OSError as error:
            self._entries, self._seen, self._stamp = [], None, None
            raise TokenError(f"{self.path}: cannot be read ({error.strerror})") from None
        self._stamp = stamp
        if content == self._seen:
            return False
        # A file that cannot be parsed holds no tokens (TokenError): every client is refused until it is fixed.
        self._entries, self._seen = [], content
        if content is not None:
            self._entries = self._parse(content)
        return True

    def _read_spared(self) -> bytes:
        """The file's content, read with the descriptor kept in reserve when the process has none free."""
        try:
            return self.path.read_bytes()
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE) or self._spare is None:
                raise
        os.close(self._spare)  # its number is the one the read below takes
        self._spare = None
        try:
            return self.path.read_bytes()
        finally:
            with contextlib.suppress(OSError):
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def keep_spare(self) -> None:
        """Hold one descriptor in reserve for `refresh` (a serving host's store; `close_spare` gives it back)."""
        if self._spare is None:
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def close_spare(self) -> None:
        """Give the reserved descriptor back."""
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

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

    def devices(self) -> frozenset[str]:
        """The devices the tokens authenticate, as the file was last read."""
        return frozenset(entry.device_id for entry in self._entries if entry.device_id is not None)

    # --- the token commands ----------------------------------------------------------------------

    def entries(self) -> list[TokenEntry]:
        """The tokens in the file, in the order they were created."""
        return self._read()

    def create(self, name: str, device_id: str | None = None) -> str:
        """Store a new token named `name`, authenticating `device_id` if given, and return it (the only time
        it is shown), once the file that holds it is durable. A device has one token at a time."""
        if not _NAME.fullmatch(name):
            raise TokenError(f"--name: {name!r} is not 1 to 64 letters, digits, '.', '_' or '-'")
        if device_id is not None and not _NAME.fullmatch(device_id):
            raise TokenError(f"--device: {device_id!r} is not 1 to 64 letters, digits, '.', '_' or '-'")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._locked():
            entries = self._read()
            if any(entry.name == name for entry in entries):
                raise TokenError(
                    f"--name: a token named {name!r} exists; revoke it first or pick another name"
                )
            if device_id is not None and any(entry.device_id == device_id for entry in entries):
                raise TokenError(f"--device: device {device_id!r} has a token; revoke it first")
            created_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._write([*entries, TokenEntry(name, digest(token), created_at, device_id)])
        return token

    def revoke(self, name: str) -> None:
        """Remove the token named `name`; its client is refused from its next request on."""
        with self._locked():
            entries = self._read()
            kept = [entry for entry in entries if entry.name != name]
            if len(kept) == len(entries):
                raise TokenError(f"--name: no token named {name!r}")
            self._write(kept)

    def withdraw(self, token: str) -> None:
        """Remove this token if the file still holds it (one created but never handed over). It goes by the
        token's digest, not its name: the name may have been revoked and given to another token since."""
        sha256 = digest(token)
        with self._locked():
            entries = self._read()
            kept = [entry for entry in entries if entry.sha256 != sha256]
            if len(kept) != len(entries):
                self._write(kept)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lock file beside the token file for one read-modify-write, so that concurrent commands
        change the file one after another and each sees the changes before it."""
        try:
            make_directories(self.path.parent)
            handle = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise TokenError(f"{error.filename or self.lock_path}: {error.strerror or error}") from None
        try:
            # Polled rather than blocking: a blocking flock cannot be bounded without a signal handler.
            end = time.monotonic() + self.lock_seconds
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= end:
                        raise TokenError(
                            f"{self.lock_path}: held by another token command for over "
                            f"{self.lock_seconds:g} s; try again"
                        ) from None
                    time.sleep(_LOCK_POLL_SECONDS)
            yield
        finally:
            os.close(handle)  # releases the lock

    def _read(self) -> list[TokenEntry]:
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise TokenError(f"{self.path}: cannot be read ({error.strerror})") from None
        return self._parse(content)

    def _parse(self, content: bytes) -> list[TokenEntry]:
        try:
            document = json.loads(content)
            return [
                TokenEntry(item["name"], item["sha256"], item["created_at"], item.get("device_id"))
                for item in document["tokens"]
            ]
        except (ValueError, KeyError, TypeError) as error:
            raise TokenError(f"{self.path}: not a token file ({error})") from None

    def _write(self, entries: list[TokenEntry]) -> None:
        """Replace the file atomically and durably: the new file (0600 from its creation) is synced, renamed
        over the old one, and the rename synced with the folder."""
        document = {"tokens": [vars(entry) for entry in entries]}
        try:
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        except OSError as error:
            raise TokenError(f"{self.path}: cannot be written ({error.strerror})") from None
        try:
            os.fchmod(handle, FILE_MODE)  # mkstemp's 0600 is masked by the umask
            with os.fdopen(handle, "w") as file:
                json.dump(document, file, indent=2)
                file.write("\n")
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
            folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except OSError as error:
            Path(temporary).unlink(missing_ok=True)
            raise TokenError(f"{self.path}: cannot be written ({error.strerror})") from None
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def write_secret(path: Path, token: str) -> None:
    """Write a token to a new file created 0600 (`token create --out`); an existing file is refused, and a
    file that could not be written whole is removed."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
