"""The `execution_environments` user configuration: load, validate, select a profile, resolve defaults.

Validation uses the spec's own schema (spec/schema/config/execution_environments.schema.json): a file is
decoded by its plain twin (`wuu.generated.plain.ExecutionEnvironments`, checks generated from that schema,
with neither pydantic nor jsonschema to import), and only a file that fails is read again by the schema's
jsonschema validator, so that it is refused with every error at once, one line each, naming the file, the
profile and the field.

A selected profile holds its backend's plain class (LocalExecutionProfile, DockerExecutionProfile, ...)
with its defaults resolved from the schema (its branch's `default` keywords, which the spec keeps equal to
`x-backend-defaults`), never from a second table here: a field that is omitted, or zero where the schema
says zero selects the default (`shutdown_timeout_ms`, `lifetime_seconds`), has the backend's default value.
Backends read their settings as typed attributes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from wuu.generated.plain import ExecutionEnvironments, ExecutionProfile, Invalid, LocalExecutionProfile

from .errors import ProfileError

if TYPE_CHECKING:
    from jsonschema import ValidationError

LOCAL = "local"
# The fields whose zero selects the backend's default, like their omission (ExecutionProfile, rule (6)).
ZERO_MEANS_DEFAULT = frozenset({"shutdown_timeout_ms", "lifetime_seconds"})

S = TypeVar("S", bound=ExecutionProfile)


def _branches() -> dict[str, str]:
    """Backend name -> the def of its profile branch, read from the ExecutionProfile union."""
    from wuu.generated import validators

    defs = validators.bundle()["$defs"]
    found = {}
    for branch in defs["ExecutionProfile"]["oneOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        found[defs[name]["properties"]["backend"]["const"]] = name
    return found


def backend_defaults(backend: str) -> dict[str, Any]:
    """The spec's defaults for one backend (`x-backend-defaults`)."""
    from wuu.generated import validators

    defaults: dict[str, Any] = validators.bundle()["$defs"]["ExecutionProfile"]["x-backend-defaults"][backend]
    return defaults


def resolve_defaults(settings: ExecutionProfile) -> ExecutionProfile:
    """The profile with its zeros that select the default replaced by the backend's default.

    An omitted field already has it: the plain classes' defaults are the branches' `default` keywords,
    which the spec keeps equal to `x-backend-defaults` (a test checks both agree).
    """
    defaults = {attribute: default for attribute, _, _, default in settings.__fields__}
    zeros = {
        field: defaults[field]
        for field in ZERO_MEANS_DEFAULT
        if field in defaults and getattr(settings, field) == 0
    }
    return settings.model_copy(update=zeros) if zeros else settings


class Profile(NamedTuple, Generic[S]):
    """A selected profile: its name, and its backend's model with the defaults resolved.

    This and `Configuration` are named tuples, not dataclasses: a `command` adapter starts once its file is
    read, and defining a dataclass (with the import of dataclasses and inspect) would delay it.
    """

    name: str
    settings: S
    """The validated model (LocalExecutionProfile, DockerExecutionProfile, ...), defaults resolved."""

    @property
    def backend(self) -> str:
        """The backend's name (`local`, `docker`, ...)."""
        return self.settings.backend

    def forwarded_environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The `forward_env` variables and their values; a missing one rejects startup, naming it."""
        names = self.settings.forward_env or []
        missing = [name for name in names if name not in environ]
        if missing:
            raise ProfileError(
                f"profile {self.name!r}: forward_env: {', '.join(missing)} not set in the environment"
            )
        return {name: environ[name] for name in names}

    def no_tcp(self) -> bool:
        """Whether the profile keeps its confined commands off TCP (a local profile's `command_network`)."""
        return getattr(self.settings, "command_network", None) == "no_tcp"

    def file_roots(self) -> list[dict[str, Any]]:
        """The file roots a binding that names none gets (a local profile's `file_roots`), as on the wire."""
        roots = getattr(self.settings, "file_roots", None) or []
        return [root.to_wire() for root in roots]


def _where(path: str, parts: Sequence[str]) -> str:
    """`FILE: profile 'NAME': FIELD` for a location in a profile, else `FILE: execution_environments.FIELD`."""
    if len(parts) >= 2 and parts[0] == "profiles":
        return f"{path}: profile {parts[1]!r}: {'.'.join(parts[2:]) or '(the profile)'}"
    return f"{path}: {'.'.join(['execution_environments', *parts])}"


def _problem(path: str, error: ValidationError, prefix: Sequence[str] = ()) -> list[str]:
    """The lines of one schema error: one for each field it is about, naming the file and the profile."""
    from wuu.generated import validators

    own = [str(part) for part in error.absolute_path]
    where = ".".join(own)
    # A missing, unknown or dependent field (or a bad profile name) is named besides the object that has it.
    start = len(where) + 1 if where else 0
    fields = sorted(location[start:] for location in validators.error_locations([error]) if location != where)
    located = [[*prefix, *own, field] for field in fields] or [[*prefix, *own]]
    return [f"{_where(path, parts)}: {error.message}" for parts in located]


class Configuration(NamedTuple):
    """The validated `execution_environments` of a user configuration."""

    profiles: dict[str, Profile[ExecutionProfile]]
    default: str

    def select(self, name: str | None = None) -> Profile[ExecutionProfile]:
        """The named profile, or the default one (`local` when none is set)."""
        chosen = self.default if name is None else name
        if chosen not in self.profiles:
            known = ", ".join(sorted(self.profiles))
            raise ProfileError(f"no profile is named {chosen!r}; the profiles are {known}")
        return self.profiles[chosen]


def _problems(path: str, environments: Any) -> list[str]:
    """Every error of the `execution_environments` value, one line each."""
    from wuu.generated import validators

    problems: list[str] = []
    branches = _branches()
    given = environments.get("profiles", {}) if isinstance(environments, dict) else {}
    profiles = given if isinstance(given, dict) else {}  # anything else is an error of the schema's, below
    for name, profile in profiles.items():
        if name == LOCAL:
            problems.append(f"{path}: profile 'local': the name is reserved for local execution")
            continue
        backend = profile.get("backend") if isinstance(profile, dict) else None
        if backend not in branches:
            known = ", ".join(sorted(branches))
            problems.append(f"{path}: profile {name!r}: backend: {backend!r} is not one of {known}")
            continue
        # Against its backend's branch, so that errors name fields, not the union's failed branches.
        for error in validators.errors(branches[backend], profile):
            problems += _problem(path, error, ("profiles", name))
    located: set[str] = set()
    for error in validators.errors("ExecutionEnvironments", environments):
        where = [str(part) for part in error.absolute_path]
        if where[:1] == ["profiles"] and len(where) >= 2:
            continue  # a profile's own errors are above
        if (
            where == ["profiles"]
            and "propertyNames" in error.relative_schema_path
            and error.instance == LOCAL
        ):
            continue  # the reserved name, said above
        located.add(".".join(where))
        problems += _problem(path, error)
    default = environments.get("default", LOCAL) if isinstance(environments, dict) else LOCAL
    if "default" not in located and default != LOCAL and default not in profiles:
        problems.append(f"{path}: execution_environments.default: no profile is named {default!r}")
    return problems


def parse(document: Any, path: str = "configuration") -> Configuration:
    """Validate a user configuration document (the profile `local` always exists)."""
    if not isinstance(document, dict):
        raise ProfileError(f"{path}: the configuration is not a JSON object")
    given = document.get("execution_environments", {})
    try:
        environments = ExecutionEnvironments.model_validate(given)
    except Invalid as invalid:
        # The slow path, for a file with errors: the schema's validator names every one of them.
        raise ProfileError("\n".join(_problems(path, given) or [f"{path}: {invalid}"])) from None
    if environments.default != LOCAL and environments.default not in environments.profiles:
        raise ProfileError(
            f"{path}: execution_environments.default: no profile is named {environments.default!r}"
        )
    local: ExecutionProfile = LocalExecutionProfile.model_validate({"backend": LOCAL})
    selected = {
        name: Profile(name, resolve_defaults(settings))
        for name, settings in {LOCAL: local, **environments.profiles}.items()
    }
    return Configuration(selected, environments.default)


def load(path: Path) -> Configuration:
    """Read and validate a user configuration file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such configuration file") from None
    except json.JSONDecodeError as error:
        raise ProfileError(f"{path}: line {error.lineno} column {error.colno}: {error.msg}") from None
    return parse(document, str(path))
