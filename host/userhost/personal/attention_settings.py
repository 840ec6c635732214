"""The owner's attention settings (spec/schema/userhost/attention.schema.json): persisted in the space's store,
applied to the attention owner when the host starts and whenever the owner changes them, and the Personal
plugin's `attention.settings.*` methods on them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wuu.generated.models import (
    AttentionSettings,
    AttentionSettingsReadParams,
    AttentionSettingsReadResult,
    AttentionSettingsSetParams,
    AttentionSettingsSetResult,
    QuietHours,
    UserHostErrorCode,
)

from ..errors import UserHostError
from ..plugins import PluginCall
from .attention import AttentionPolicy, AttentionService
from .durably import durably
from .provider import SessionDomain


@dataclass(frozen=True)
class DailyQuiet:
    """Quiet hours as a check of a moment: from `start` (included) to `end` (excluded) on the clock of `zone`,
    across midnight when `end` is before `start`, all day when they are equal."""

    start: time
    end: time
    zone: ZoneInfo

    @classmethod
    def of(cls, quiet: QuietHours) -> DailyQuiet:
        """The check of stored quiet hours; ValueError for a time zone this machine does not know."""
        try:
            zone = ZoneInfo(quiet.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"time_zone: {quiet.time_zone!r} is not a known IANA time zone") from None
        return cls(time.fromisoformat(quiet.start), time.fromisoformat(quiet.end), zone)

    def __call__(self, moment: datetime) -> bool:
        local = moment.astimezone(self.zone).time()
        if self.start == self.end:
            return True
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end


def policy_of(settings: AttentionSettings) -> AttentionPolicy:
    """The attention policy the settings make; ValueError for quiet hours in an unknown time zone."""
    return AttentionPolicy(
        enabled=settings.notifications,
        quiet=None if settings.quiet_hours is None else DailyQuiet.of(settings.quiet_hours),
        window=timedelta(seconds=settings.grouping_window_seconds),
    )


class OwnerAttention:
    """The persisted settings of one space and the attention owner they govern: the service's policy is always
    the one of the settings last saved."""

    def __init__(
        self, store: SessionDomain, service: AttentionService, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._service = service
        self._clock = clock
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Apply the saved settings (the host starting). Settings saved in a zone this machine no longer knows
        keep their quiet hours all day rather than notify in them."""
        settings = await self._store.attention_settings()
        try:
            policy = policy_of(settings)
        except ValueError:
            policy = AttentionPolicy(enabled=settings.notifications, quiet=lambda _: True)
        self._service.set_policy(policy)

    async def read(self) -> AttentionSettings:
        """The saved settings."""
        return await self._store.attention_settings()

    async def set(self, settings: AttentionSettings) -> AttentionSettings:
        """Save new settings and apply them, one change at a time, so the policy is the last saved one's;
        ValueError, saving nothing, for quiet hours in an unknown time zone."""
        policy = policy_of(settings)
        async with self._lock:
            saved = await self._store.save_attention_settings(settings, self._clock())
            self._service.set_policy(policy)
        return saved


class AttentionSettingsMethods:
    """The plugin's `attention.settings.*` methods; the plugin gives them the owner's settings."""

    attention_settings: OwnerAttention

    async def attention_settings_read(
        self, params: AttentionSettingsReadParams, call: PluginCall
    ) -> AttentionSettingsReadResult:
        return AttentionSettingsReadResult(settings=await self.attention_settings.read())

    async def attention_settings_set(
        self, params: AttentionSettingsSetParams, call: PluginCall
    ) -> AttentionSettingsSetResult:
        try:
            # Once submitted, the write is the call's outcome even if the call is cancelled meanwhile.
            saved = await durably(self.attention_settings.set(params.settings))
        except ValueError as error:
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS, str(error), "params.settings.quiet_hours.time_zone"
            ) from None
        return AttentionSettingsSetResult(settings=saved)
