"""The relay of user attention to the registered phones (spec/schema/config/phone_delivery.schema.json): it
observes the attention owner for the host's whole life and hands each notification, as one generic
content-free `PhoneNotification`, to the phone provider once for each push registration whose device a token
still authenticates. Best-effort: a failed delivery is logged without its push token and not retried, and the
deliveries of one notification go out together, so a slow or failing device delays no other."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from wuu.generated.models import PhoneDelivery, PhoneNotification

from .attention import Notification, Subscription
from .phone import PhoneProvider
from .provider import PushTarget, TaskLedger

log = logging.getLogger("wuu.host.userhost.personal")


class PushRelay:
    """Relays `subscription`'s notifications to `phone` for the registrations of `ledger`; `devices` answers
    which devices are authenticated now (a revoked device's registrations receive nothing)."""

    def __init__(
        self,
        subscription: Subscription,
        ledger: TaskLedger,
        devices: Callable[[], frozenset[str]],
        phone: PhoneProvider,
    ) -> None:
        self._subscription = subscription
        self._ledger = ledger
        self._devices = devices
        self._phone = phone
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        """Stop relaying (what is not yet delivered is dropped) and close the provider."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._subscription.aclose()
        await self._phone.close()

    async def _run(self) -> None:
        async for notification in self._subscription:
            try:
                targets = await self._ledger.push_registrations()
                devices = self._devices()
            except Exception:
                log.exception("the push registrations cannot be read; a notification is dropped")
                continue
            phoned = _phoned(notification)
            await asyncio.gather(
                *(self._deliver(target, phoned) for target in targets if target.device_id in devices)
            )

    async def _deliver(self, target: PushTarget, notification: PhoneNotification) -> None:
        delivery = PhoneDelivery(
            registration_id=target.registration_id,
            device_id=target.device_id,
            provider=target.provider,
            app_id=target.app_id,
            token=target.token,
            notification=notification,
        )
        try:
            await self._phone.deliver(delivery)
        except Exception as error:
            log.warning(
                "a phone delivery failed",
                extra={
                    "registration_id": target.registration_id,
                    "device_id": target.device_id,
                    "error": f"{type(error).__name__}: {error}",
                },
            )


def _phoned(notification: Notification) -> PhoneNotification:
    """The generic agent notification a phone is told: no content, no per-item digest."""
    return PhoneNotification(
        kind="agent_attention",
        agent_id=notification.agent_id,
        count=notification.count,
        session_id=notification.latest.session_id,
        message_seq=notification.latest.message_seq,
    )
