"""Which review-ledger provider a migration imports into: the composition profile selects it, given as
`--composition-profile` or, without that override, as the `composition_profile` of the `--config` file
(spec/schema/config/user_configuration.schema.json). There is no implicit configuration file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from wuu.generated import validators
from wuu.generated.models import UserConfiguration

from ..storage.review_ledger.errors import ReviewLedgerError
from ..storage.review_ledger.layout import PROVIDER_ID, state_folder

PROFILE_PROVIDERS = {"personal": PROVIDER_ID}
"""The composition profiles of this installation that select a review-ledger provider, and the provider."""


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


def select(home: Path, user_space_id: str, profile: str | None, config: Path | None) -> Selection:
    """Resolve the selected provider; a configuration file given is read and checked even when the flag
    overrides its profile. ReviewLedgerError, naming the flag, when no profile is given or configured, when
    the configuration file is wrong, or when the profile selects no review-ledger provider."""
    configured = load_configuration(config).composition_profile if config is not None else None
    where = "--composition-profile"
    if profile is None:
        profile, where = configured, f"--config: {config}: composition_profile"
    if profile is None:
        raise ReviewLedgerError(
            "no composition profile: give --composition-profile (the override the host uses) or --config FILE "
            "(the configuration whose composition_profile the host uses)"
        )
    if profile not in PROFILE_PROVIDERS:
        known = ", ".join(sorted(PROFILE_PROVIDERS))
        raise ReviewLedgerError(
            f"{where}: the profile {profile!r} selects no review-ledger provider (known: {known})"
        )
    return Selection(home, user_space_id, profile, PROFILE_PROVIDERS[profile])


def load_configuration(path: Path) -> UserConfiguration:
    """The configuration file at `path`; ReviewLedgerError naming the file and the field when it is wrong."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReviewLedgerError(f"--config: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ReviewLedgerError(f"--config: {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise ReviewLedgerError(
            f"--config: {path}: line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    found = validators.errors("UserConfiguration", document)
    if found:
        problems = sorted(
            f"--config: {path}: {'.'.join(str(part) for part in error.absolute_path) or 'the file'}: {error.message}"
            for error in found
        )
        raise ReviewLedgerError("\n".join(problems))
    return UserConfiguration.model_validate(document, strict=True)
