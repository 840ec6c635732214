"""Composition profiles as data (host/userhost/compositions.py): the shipped catalog is what this installation
implements, the shipped `personal` bundle resolves to its modules and bindings, and patches, bases and
bindings resolve (or fail naming their field) as spec/schema/config/composition.schema.json says."""

from __future__ import annotations

import re
from typing import Any

import pytest

from wuu.generated.models import CompositionProfile, UserConfiguration
from wuu.host.userhost.compositions import (
    AUTHORIZATION,
    CompositionError,
    SelectedComposition,
    select_profile,
    shipped_catalog,
)
from wuu.host.userhost.configuration import Configuration
from wuu.host.userhost.personal import AUTHORIZATION_PROVIDERS, SESSION_DOMAIN_PROVIDERS
from wuu.host.userhost.storage.review_ledger.layout import PROVIDER_ID


def resolve(
    name: str, profiles: dict[str, Any] | None = None, domain: str = "personal"
) -> SelectedComposition:
    content = UserConfiguration.model_validate({"composition_profiles": profiles or {}})
    return select_profile(
        name, "--composition-profile", Configuration(content, None, "c.json"), product_domain=domain
    )


def test_the_catalog_lists_exactly_the_providers_this_installation_implements() -> None:
    offered = {name: set(service.providers) for name, service in shipped_catalog().services.items()}
    assert offered == {
        "session.domain": set(SESSION_DOMAIN_PROVIDERS),
        "execution.authorization": set(AUTHORIZATION_PROVIDERS),
        "review.ledger": {PROVIDER_ID},
    }


def test_the_personal_bundle_selects_receipts_and_binds_every_service() -> None:
    personal = resolve("personal")
    assert personal.modules == {"wuu.personal", "wuu.client-input-receipts"}
    assert dict(personal.services) == {
        "session.domain": "wuu.session-domain.sqlite",
        "execution.authorization": "wuu.authorization.native",
        "review.ledger": "wuu.review-ledger.sqlite",
    }


def test_patches_chain_through_configured_bases() -> None:
    profiles = {
        "quiet": {"base": "personal", "remove_modules": ["wuu.client-input-receipts"]},
        "solo": {
            "base": "quiet",
            "exclusions": [AUTHORIZATION],
            "add_modules": ["wuu.client-input-receipts"],
        },
    }
    assert resolve("quiet", profiles).modules == {"wuu.personal"}
    solo = resolve("solo", profiles)
    assert (
        solo.modules == {"wuu.personal", "wuu.client-input-receipts"} and solo.provider(AUTHORIZATION) is None
    )
    assert solo.name == "solo"


def test_a_flag_patch_binds_or_excludes_a_service() -> None:
    personal = resolve("personal")
    excluded = personal.patched(CompositionProfile(exclusions=[AUTHORIZATION]), "--authorization")
    assert excluded.provider(AUTHORIZATION) is None and excluded.modules == personal.modules
    again = excluded.patched(
        CompositionProfile(services={AUTHORIZATION: "wuu.authorization.native"}), "--authorization"
    )
    assert again.provider(AUTHORIZATION) == "wuu.authorization.native"
    with pytest.raises(
        CompositionError,
        match=re.escape("--authorization.services.execution.authorization: no provider 'x.y'"),
    ):
        personal.patched(CompositionProfile(services={AUTHORIZATION: "x.y"}), "--authorization")


@pytest.mark.parametrize(
    ("name", "profiles", "message"),
    [
        ("nope", {}, "--composition-profile: no profile 'nope' in this installation or the configuration"),
        (
            "a",
            {"a": {"base": "b"}, "b": {"base": "a"}},
            "c.json: composition_profiles.b.base: a -> b -> a is a cycle",
        ),
        ("a", {"a": {}}, "c.json: composition_profiles.a: gives neither modules nor base"),
        (
            "a",
            {"a": {"modules": [], "base": "personal"}},
            "composition_profiles.a: gives both modules and base",
        ),
        ("a", {"a": {"modules": [], "add_modules": ["wuu.personal"]}}, "a.add_modules: a patch needs a base"),
        ("a", {"a": {"base": "b"}}, "composition_profiles.a.base: no profile 'b'"),
        (
            "a",
            {"a": {"base": "personal", "exclusions": ["mail.send"]}},
            "a.exclusions.0: no service 'mail.send'",
        ),
    ],
)
def test_a_wrong_profile_names_its_field(name: str, profiles: dict[str, Any], message: str) -> None:
    with pytest.raises(CompositionError, match=re.escape(message)):
        resolve(name, profiles)


def test_a_profile_without_the_personal_plugin_composes_on_any_domain() -> None:
    profiles = {
        "receipts": {
            "modules": ["wuu.client-input-receipts"],
            "services": {"session.domain": "wuu.session-domain.sqlite"},
        }
    }
    assert resolve("receipts", profiles, domain="coding").modules == {"wuu.client-input-receipts"}
    with pytest.raises(CompositionError, match="which a 'coding' host does not compose"):
        resolve("personal", domain="coding")
