"""Cases of `push/register` and `push/unregister`: device-bound registrations.

A registration binds the transport's authenticated device. Whether the suite's transports (stdio, the
local socket) authenticate one is the host's: a host whose transport has none refuses with
`permission_denied`, one whose transport has one registers. The cases hold either way."""

from __future__ import annotations

from typing import Any

from ..session import HostSession
from ..suite import USERHOST

REGISTER = "push/register"
UNREGISTER = "push/unregister"
TOKEN = "conformance-push-token-0123456789abcdef"
REGISTRATION = {"provider": "apns", "app_id": "dev.wuu.conformance", "token": TOKEN}
UNKNOWN = "conformance-no-such-registration"


async def unregistered(host: HostSession, registration_id: str, device: bool) -> bool | None:
    """`push/unregister`'s `unregistered`; None when a transport without a device is refused."""
    message = await host.request(UNREGISTER, {"registration_id": registration_id})
    if not device and "error" in message:
        host.expect_error(message, "permission_denied", f"{UNREGISTER} on a transport without a device")
        return None
    host.expect("result" in message, f"{UNREGISTER} failed: {message.get('error')}")
    removed: bool = message["result"]["unregistered"]
    return removed


@USERHOST.case("push.register-unregister")
async def register_unregister(host: HostSession) -> None:
    """push/register either refuses a transport without an authenticated device with permission_denied, or
    saves a registration of the transport's device and provider that never returns the token, which
    push/unregister then removes once (true, then false); an unknown registration is never removed."""
    await host.initialize()
    message = await host.request(REGISTER, REGISTRATION)
    device = "result" in message
    if not device:
        host.expect_error(message, "permission_denied", f"{REGISTER} without a registration")
        host.expect(
            await unregistered(host, UNKNOWN, device) in (None, False),
            f"{UNREGISTER} removed the unknown registration {UNKNOWN}",
        )
        return
    saved: dict[str, Any] = message["result"]
    host.expect(saved["provider"] == REGISTRATION["provider"], f"the registration's provider is {saved}")
    host.expect(TOKEN not in str(saved), f"{REGISTER} returned the push token: {saved}")
    host.expect(await unregistered(host, UNKNOWN, device) is False, f"{UNREGISTER} removed {UNKNOWN}")
    registration_id = saved["registration_id"]
    host.expect(await unregistered(host, registration_id, device) is True, f"{UNREGISTER} did not remove it")
    host.expect(
        await unregistered(host, registration_id, device) is False, f"{UNREGISTER} removed it a second time"
    )


@USERHOST.case("push.params-checked")
async def params_checked(host: HostSession) -> None:
    """push/register with a provider other than apns and fcm, or an empty token, gets invalid_params naming
    the field, before any device check."""
    await host.initialize()
    await host.error(REGISTER, {**REGISTRATION, "provider": "webpush"}, "invalid_params", field="provider")
    await host.error(REGISTER, {**REGISTRATION, "token": ""}, "invalid_params", field="token")
