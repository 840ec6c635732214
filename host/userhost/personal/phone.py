"""Phone providers: where the relay of user attention hands each delivery (spec/schema/config/
phone_delivery.schema.json). `load_phone_provider` reads the provider's file (`serve --phone-config`).

    phone = load_phone_provider(Path("/etc/wuu/phone.json"))   # {"kind": "stand_in", "path": "/tmp/phone.jsonl"}
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wuu.generated import validators
from wuu.generated.models import PhoneDelivery

from ..private import FILE_MODE

if TYPE_CHECKING:
    import aiohttp

KINDS = {"stand_in": "StandInPhoneProvider", "webhook": "WebhookPhoneProvider"}
"""Each provider kind and its def."""
DEFAULT_TIMEOUT = 10.0


class PhoneConfigError(ValueError):
    """A phone provider file that cannot be used: the message names the file and every field that is wrong."""


class PhoneProvider(Protocol):
    """Hands one delivery to a phone; raises when it fails (the relay logs it and goes on)."""

    async def deliver(self, delivery: PhoneDelivery) -> None: ...

    async def close(self) -> None: ...


class StandInPhone:
    """Appends each delivery to a file, one JSON line each, without its push token: what a test or a
    demonstration reads to see what a phone would have been told."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def deliver(self, delivery: PhoneDelivery) -> None:
        kept = {key: value for key, value in delivery.to_wire().items() if key != "token"}
        await asyncio.to_thread(self._append, json.dumps(kept) + "\n")

    def _append(self, line: str) -> None:
        handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            os.write(handle, line.encode())
        finally:
            os.close(handle)

    async def close(self) -> None:
        return None


class WebhookPhone:
    """Posts each delivery, push token included, to a URL with `Authorization: Bearer <secret>`; a response
    other than 2xx, or none within `timeout`, fails it."""

    def __init__(self, url: str, secret: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url
        self._secret = secret
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def deliver(self, delivery: PhoneDelivery) -> None:
        import aiohttp  # loaded only by a host that posts to a webhook

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        async with self._session.post(
            self.url, json=delivery.to_wire(), headers={"Authorization": f"Bearer {self._secret}"}
        ) as response:
            if not 200 <= response.status < 300:
                raise RuntimeError(f"the webhook answered {response.status}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def load_phone_provider(path: Path) -> PhoneProvider:
    """The provider of a phone delivery file; PhoneConfigError naming every problem at once."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PhoneConfigError(f"{path}: {error}") from None
    kind = document.get("kind") if isinstance(document, dict) else None
    if kind not in KINDS:
        raise PhoneConfigError(f"{path}: kind: {kind!r} is not one of {', '.join(sorted(KINDS))}")
    # Against the kind's own def, so that each error names its field rather than the union's failed branches.
    problems = [
        f"{path}: {'.'.join(str(part) for part in error.absolute_path) or '(the object)'}: {error.message}"
        for error in validators.errors(KINDS[kind], document)
    ]
    if problems:
        raise PhoneConfigError("; ".join(problems))
    if kind == "stand_in":
        return StandInPhone(Path(document["path"]))
    secret = os.environ.get(document["secret_env"], "")
    if not secret:
        raise PhoneConfigError(f"{path}: secret_env: the variable {document['secret_env']} is unset or empty")
    return WebhookPhone(document["url"], secret, float(document.get("timeout_seconds", DEFAULT_TIMEOUT)))
