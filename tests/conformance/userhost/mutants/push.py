"""Mutants of `push/register` and `push/unregister`: registrations bound to an authenticated device."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from wuu.generated.models import PushRegisterParams, PushRegisterResult, UserHostErrorCode
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.services import Caller

from . import mutant
from .harness import Message, RequestRewriter, ServicesProxy, wrap_services


class RegistersWithoutDevice(ServicesProxy):
    """A transport without an authenticated device gets a registration bound to a made-up device."""

    fresh = itertools.count(1)

    async def push_register(self, params: PushRegisterParams, caller: Caller) -> PushRegisterResult:
        try:
            result: PushRegisterResult = await self.inner.push_register(params, caller)
        except UserHostError as error:
            if error.code is not UserHostErrorCode.PERMISSION_DENIED:
                raise
            return PushRegisterResult(
                registration_id=f"mutant-registration-{next(self.fresh)}",
                device_id="mutant-device",
                provider=params.provider,
                registered_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            )
        return result


@mutant(
    "push-registered-without-device",
    "answers push/register on a transport without an authenticated device with a registration",
    "push.register-unregister",
)
def push_registered_without_device() -> Composer:
    """The host's push service answers its `permission_denied` refusal of a transport without a device with
    a made-up registration (that `push/unregister` then does not know)."""
    return wrap_services(RegistersWithoutDevice)


def _in_schema(request: Message) -> list[Message]:
    params = request.get("params")
    if request.get("method") == "push/register" and isinstance(params, dict):
        if params.get("provider") not in ("apns", "fcm"):
            params["provider"] = "apns"
        if params.get("token") == "":
            params["token"] = "mutant-token"
    return [request]


@mutant(
    "push-params-unchecked",
    "takes push/register params outside the schema (an unknown provider, an empty token) to the device check",
    "push.params-checked",
)
class PushParamsUnchecked(RequestRewriter):
    """An unknown push provider becomes `apns` and an empty token a made-up one before the host sees them,
    so the host answers with its device check instead of `invalid_params`."""

    def rewrite(self, request: Message) -> list[Message]:
        return _in_schema(request)
