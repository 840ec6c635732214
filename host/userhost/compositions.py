"""Composition profiles as data (spec/schema/config/composition.schema.json): the installation's catalog of
modules, services and providers and its shipped profiles (spec/data/composition_catalog.json), the user's
own profiles (the configuration's `composition_profiles`), and how a named profile resolves into the modules
a host composes and the provider bound to each service.

    selected = select_profile("personal", "--composition-profile", configuration, product_domain="personal")
    selected.selects(RECEIPTS_MODULE), selected.provider("execution.authorization")

Every problem is collected, so that one error lists them all, each naming its field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from wuu.generated.models import CompositionCatalog, CompositionProfile

from .configuration import Configuration

PERSONAL_MODULE = "wuu.personal"
RECEIPTS_MODULE = "wuu.client-input-receipts"
SESSION_DOMAIN = "session.domain"
AUTHORIZATION = "execution.authorization"
REVIEW_LEDGER = "review.ledger"


class CompositionError(ValueError):
    """A profile that cannot be composed: one line per problem, each naming its field."""


@dataclass(frozen=True)
class SelectedComposition:
    """A resolved profile: the modules to compose and the provider of each bound service. A service without
    a binding has no provider: nothing takes its place."""

    name: str
    modules: frozenset[str]
    services: Mapping[str, str]

    def selects(self, module: str) -> bool:
        return module in self.modules

    def provider(self, service: str) -> str | None:
        """The provider bound to `service`, or None when the profile binds none (it is excluded)."""
        return self.services.get(service)

    def patched(self, patch: CompositionProfile, where: str) -> SelectedComposition:
        """This composition with a patch's modules, bindings and exclusions applied (as a profile whose
        `base` is this one); CompositionError naming `where` when the patch is wrong."""
        problems: list[str] = []
        catalog = shipped_catalog()
        result = _apply(self, patch, where, catalog, problems)
        if result is not None:
            problems.extend(f"{where}: {problem}" for problem in _unmet(result, catalog))
        if result is None or problems:
            raise CompositionError("\n".join(problems))
        return result


@cache
def shipped_catalog() -> CompositionCatalog:
    """The installation's catalog, as spec/data/composition_catalog.json ships it."""
    text = resources.files("wuu.generated").joinpath("schema", "data", "composition_catalog.json")
    return CompositionCatalog.model_validate(json.loads(text.read_text("utf-8")), strict=True)


def select_profile(
    name: str, where: str, configuration: Configuration, *, product_domain: str
) -> SelectedComposition:
    """The profile `name` (named by `where`: a flag, or the configuration's field), resolved from the shipped
    and the configured profiles; CompositionError listing every problem of the configured profiles and of
    this selection."""
    catalog = shipped_catalog()
    configured = _configured(configuration)
    problems: list[str] = []
    resolved: dict[str, SelectedComposition | None] = {}
    for own in sorted(configured):
        label = configuration.field_label(f"composition_profiles.{own}")
        if own in catalog.profiles:
            problems.append(
                f"{label}: {own!r} is a shipped profile; name yours otherwise and give it as its base"
            )
            continue
        _resolve(own, catalog, configured, configuration, resolved, problems, ())
    selected: SelectedComposition | None = None
    if name in catalog.profiles:
        selected = _resolve(name, catalog, {}, configuration, resolved, problems, ())
    elif name in configured:
        selected = resolved.get(name)
    else:
        known = ", ".join(sorted({*catalog.profiles, *configured}))
        problems.append(
            f"{where}: no profile {name!r} in this installation or the configuration (available: {known})"
        )
    if selected is not None:
        for module in sorted(selected.modules):
            domains = catalog.modules[module].product_domains
            if domains is not None and product_domain not in domains:
                problems.append(
                    f"{where}: the profile {name!r} selects {module}, which a {product_domain!r} host does not "
                    f"compose (only {', '.join(domains)})"
                )
    if problems:
        raise CompositionError("\n".join(problems))
    assert selected is not None
    return selected


def _configured(configuration: Configuration) -> dict[str, CompositionProfile]:
    profiles = configuration.content.composition_profiles
    return dict(profiles) if profiles is not None else {}


def _resolve(
    name: str,
    catalog: CompositionCatalog,
    configured: Mapping[str, CompositionProfile],
    configuration: Configuration,
    resolved: dict[str, SelectedComposition | None],
    problems: list[str],
    chain: tuple[str, ...],
) -> SelectedComposition | None:
    """The profile `name` resolved (None, with its problems added once, when it cannot be)."""
    if name in resolved:
        return resolved[name]
    shipped = name in catalog.profiles
    profile = catalog.profiles[name] if shipped else configured[name]
    where = (
        f"shipped profile {name}" if shipped else configuration.field_label(f"composition_profiles.{name}")
    )
    result: SelectedComposition | None = None
    if profile.base is None:
        before = len(problems)
        if profile.modules is None:
            problems.append(f"{where}: gives neither modules nor base")
        for patch in ("add_modules", "remove_modules"):
            if getattr(profile, patch) is not None:
                problems.append(f"{where}.{patch}: a patch needs a base profile")
        if len(problems) == before:
            result = _apply(SelectedComposition(name, frozenset(), {}), profile, where, catalog, problems)
    elif profile.modules is not None:
        problems.append(
            f"{where}: gives both modules and base; a profile lists its modules or patches a base"
        )
    elif profile.base in chain or profile.base == name:
        problems.append(f"{where}.base: {' -> '.join([*chain, name, profile.base])} is a cycle")
    elif profile.base not in catalog.profiles and profile.base not in configured:
        problems.append(
            f"{where}.base: no profile {profile.base!r} in this installation or the configuration"
        )
    else:
        base = _resolve(profile.base, catalog, configured, configuration, resolved, problems, (*chain, name))
        if base is not None:
            result = _apply(base, profile, where, catalog, problems)
    if result is not None:
        result = SelectedComposition(name, result.modules, result.services)
        unmet = _unmet(result, catalog)
        problems.extend(f"{where}: {problem}" for problem in unmet)
        result = None if unmet else result
    resolved[name] = result
    return result


def _unmet(selected: SelectedComposition, catalog: CompositionCatalog) -> list[str]:
    """The services that a selected module requires and the composition binds no provider for."""
    return [
        f"{module} requires the service {service}, which it binds no provider"
        for module in sorted(selected.modules)
        for service in catalog.modules[module].requires
        if selected.provider(service) is None
    ]


def _apply(
    base: SelectedComposition,
    patch: CompositionProfile,
    where: str,
    catalog: CompositionCatalog,
    problems: list[str],
) -> SelectedComposition | None:
    """`base` with the patch's modules, bindings and exclusions; None, with its problems added, when the
    patch names what the catalog lacks or contradicts the base."""
    before = len(problems)
    modules = set(base.modules)
    for patch_field, ids in (
        ("modules", patch.modules),
        ("add_modules", patch.add_modules),
        ("remove_modules", patch.remove_modules),
    ):
        for index, module in enumerate(ids or []):
            if module not in catalog.modules:
                known = ", ".join(sorted(catalog.modules))
                problems.append(
                    f"{where}.{patch_field}.{index}: no module {module!r} in this installation (available: {known})"
                )
            elif patch_field == "add_modules" and module in modules:
                problems.append(
                    f"{where}.{patch_field}.{index}: {module} is already in the base profile {base.name!r}"
                )
            elif patch_field == "remove_modules" and module not in modules:
                problems.append(
                    f"{where}.{patch_field}.{index}: the base profile {base.name!r} does not select {module}"
                )
            elif patch_field == "remove_modules":
                modules.discard(module)
            else:
                modules.add(module)
    services = dict(base.services)
    bindings = patch.services if patch.services is not None else {}
    for index, service in enumerate(patch.exclusions or []):
        if service not in catalog.services:
            problems.append(f"{where}.exclusions.{index}: no service {service!r} in this installation")
        elif service in bindings:
            problems.append(f"{where}.exclusions.{index}: {service} is bound in services too")
        services.pop(service, None)
    for service, provider in sorted(bindings.items()):
        offered = catalog.services.get(service)
        if offered is None:
            known = ", ".join(sorted(catalog.services))
            problems.append(
                f"{where}.services.{service}: no service {service!r} in this installation (available: {known})"
            )
        elif provider not in offered.providers:
            known = ", ".join(sorted(offered.providers))
            problems.append(
                f"{where}.services.{service}: no provider {provider!r} of {service} in this installation "
                f"(available: {known})"
            )
        else:
            services[service] = provider
    if len(problems) > before:
        return None
    return SelectedComposition(base.name, frozenset(modules), services)
