"""The `execution_environments` user configuration: load, validate, select a profile, resolve defaults.

Validation uses the spec's own schema (spec/schema/config/execution_environments.schema.json); a
bad file is an error that names the profile and the field. Defaults come from the schema's
`x-backend-defaults`, never from a second table here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from wuu.generated import validators
from wuu.generated.models import ExecutionProfile

LOCAL = "local"
_PROFILE = TypeAdapter(ExecutionProfile)


class ProfileError(Exception):
    """The configuration is wrong; the message says where (file, profile, field) and why."""


def _branches() -> dict[str, str]:
    """Backend name -> the def of its profile branch, read from the ExecutionProfile union."""
    defs = validators.bundle()["$defs"]
    found = {}
    for branch in defs["ExecutionProfile"]["oneOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        found[defs[name]["properties"]["backend"]["const"]] = name
    return found


def backend_defaults(backend: str) -> dict[str, Any]:
    """The spec's defaults for one backend (`x-backend-defaults`)."""
    defaults: dict[str, Any] = validators.bundle()["$defs"]["ExecutionProfile"]["x-backend-defaults"][backend]
    return defaults


@dataclass(frozen=True)
class Profile:
    """A selected profile with its defaults applied."""

    name: str
    settings: Any
    """The validated profile model (LocalExecutionProfile, DockerExecutionProfile, ...)."""

    @property
    def backend(self) -> str:
        return str(self.settings.backend)

    def _setting(self, field: str) -> Any:
        value = getattr(self.settings, field, None)
        # Omitted or zero means the backend's default (seed 000).
        return value if value else backend_defaults(self.backend).get(field)

    @property
    def shutdown_timeout_ms(self) -> int:
        """The EOF-to-exit budget: the profile's, or 7 s native, 60 s command, 90 s cloud."""
        return int(self._setting("shutdown_timeout_ms"))

    @property
    def lifetime_seconds(self) -> int | None:
        """The disconnected worker's idle timeout (0 means 600 s); None for backends without one."""
        value = self._setting("lifetime_seconds")
        return int(value) if value is not None else None

    @property
    def forward_env(self) -> tuple[str, ...]:
        return tuple(getattr(self.settings, "forward_env", None) or ())

    def forwarded_environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The named variables and their values; a missing one rejects startup, naming it."""
        missing = [name for name in self.forward_env if name not in environ]
        if missing:
            raise ProfileError(
                f"profile {self.name!r}: forward_env: {', '.join(missing)} not set in the environment"
            )
        return {name: environ[name] for name in self.forward_env}


def _where(path: str, location: str) -> str:
    parts = location.split(".") if location else []
    if len(parts) >= 2 and parts[0] == "profiles":
        field = ".".join(parts[2:]) or "(the profile)"
        return f"{path}: profile {parts[1]!r}: {field}"
    return f"{path}: execution_environments.{location}" if location else f"{path}: execution_environments"


def _check(path: str, name: str, value: Any, prefix: str = "") -> None:
    found = validators.errors(name, value)
    if found:
        location = max(validators.error_locations(found[:1]), key=len)
        location = ".".join(part for part in (prefix, location) if part)
        raise ProfileError(f"{_where(path, location)}: {found[0].message}")


@dataclass(frozen=True)
class Configuration:
    """The validated `execution_environments` of a user configuration."""

    profiles: dict[str, Profile]
    default: str

    def select(self, name: str | None = None) -> Profile:
        """The named profile, or the default one (`local` when none is set)."""
        chosen = self.default if name is None else name
        if chosen not in self.profiles:
            known = ", ".join(sorted(self.profiles))
            raise ProfileError(f"no profile is named {chosen!r}; the profiles are {known}")
        return self.profiles[chosen]


def parse(document: Any, path: str = "configuration") -> Configuration:
    """Validate a user configuration document (the profile `local` always exists)."""
    if not isinstance(document, dict):
        raise ProfileError(f"{path}: the configuration is not a JSON object")
    environments = document.get("execution_environments", {})
    branches = _branches()
    profiles = environments.get("profiles", {}) if isinstance(environments, dict) else {}
    if isinstance(profiles, dict):
        for name, profile in profiles.items():
            if name == LOCAL:
                raise ProfileError(f"{path}: profile 'local': the name is reserved for local execution")
            backend = profile.get("backend") if isinstance(profile, dict) else None
            if backend not in branches:
                known = ", ".join(sorted(branches))
                raise ProfileError(f"{path}: profile {name!r}: backend: {backend!r} is not one of {known}")
            _check(path, branches[backend], profile, f"profiles.{name}")
    _check(path, "ExecutionEnvironments", environments)
    selected = {LOCAL: Profile(LOCAL, _PROFILE.validate_python({"backend": LOCAL}))}
    for name, profile in profiles.items():
        selected[name] = Profile(name, _PROFILE.validate_json(json.dumps(profile), strict=True))
    default = environments.get("default", LOCAL)
    if default not in selected:
        raise ProfileError(f"{path}: execution_environments.default: no profile is named {default!r}")
    return Configuration(selected, default)


def load(path: Path) -> Configuration:
    """Read and validate a user configuration file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such configuration file") from None
    except json.JSONDecodeError as error:
        raise ProfileError(f"{path}: line {error.lineno} column {error.colno}: {error.msg}") from None
    return parse(document, str(path))
