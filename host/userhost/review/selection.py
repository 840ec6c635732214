"""Which review-ledger provider a migration imports into: the composition profile selects it, given as
`--composition-profile` or, without that override, as the `composition_profile` of the user configuration
(`--config`, else `<home>/config.json`; host/userhost/configuration.py resolves it as the host does). The
profile's `review.ledger` binding is the provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..compositions import REVIEW_LEDGER, CompositionError, select_profile
from ..configuration import ConfigurationError, load_configuration
from ..storage.review_ledger.errors import ReviewLedgerError
from ..storage.review_ledger.layout import state_folder


@dataclass(frozen=True)
class Selection:
    """What a migration runs on: a user space under a home, and the provider its profile selects."""

    home: Path
    user_space_id: str
    composition_profile: str
    provider: str

    @property
    def state(self) -> Path:
        """The space's Personal state folder, which holds the legacy ledger and the provider's file."""
        return state_folder(self.home, self.user_space_id)


def select(home: Path, user_space_id: str, profile: str | None, config: str | None) -> Selection:
    """Resolve the selected provider; the configuration is read and checked even when the flag overrides its
    profile. ReviewLedgerError, naming the flag or the field, when no profile is given or configured, when
    the configuration is wrong, or when the profile binds no review-ledger provider."""
    try:
        configuration = load_configuration(config, home)
    except ConfigurationError as error:
        raise ReviewLedgerError(str(error)) from None
    where = "--composition-profile"
    if profile is None:
        profile, where = (
            configuration.content.composition_profile,
            configuration.field_label("composition_profile"),
        )
    if profile is None:
        raise ReviewLedgerError(
            "no composition profile: give --composition-profile (the override the host uses) or --config FILE "
            "(the configuration whose composition_profile the host uses)"
        )
    try:
        # The ledgers are the Personal domain's (`state_folder`).
        selected = select_profile(profile, where, configuration, product_domain="personal")
    except CompositionError as error:
        raise ReviewLedgerError(
            f"{where}: the profile {profile!r} selects no review-ledger provider:\n{error}"
        ) from None
    provider = selected.provider(REVIEW_LEDGER)
    if provider is None:
        raise ReviewLedgerError(
            f"{where}: the profile {profile!r} selects no review-ledger provider (it binds no {REVIEW_LEDGER})"
        )
    return Selection(home, user_space_id, profile, provider)
