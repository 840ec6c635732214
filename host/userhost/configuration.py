"""The user configuration a user host and its maintenance commands read (spec/schema/config/
user_configuration.schema.json): the explicit absolute `--config` file, else `<home>/config.json` when it
exists, else nothing. No other file is read: not one of the working directory, nor a project's.

    configuration = load_configuration(args.config, home)   # ConfigurationError naming every bad field
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from wuu.generated import validators
from wuu.generated.models import UserConfiguration

USER_CONFIGURATION = "config.json"
"""The user configuration's name under the home."""


class ConfigurationError(ValueError):
    """A configuration that cannot be used: one line per problem, each naming the file and the field."""


@dataclass(frozen=True)
class Configuration:
    """A loaded configuration and where it came from: `label` is how messages name it (`--config: PATH` for
    the flag's file, the path of the user configuration), `path` None when there was no file."""

    content: UserConfiguration = field(default_factory=UserConfiguration)
    path: Path | None = None
    label: str = "no configuration"

    def field_label(self, dotted: str) -> str:
        """How a message names one field of this configuration."""
        return f"{self.label}: {dotted}"


def home_of(given: str | None) -> Path:
    """The home of a host's data: `--home` (`given`), else `$WUU_HOME`, else `~/.wuu`; ConfigurationError naming
    the flag or the variable when it is not absolute."""
    text = given or os.environ.get("WUU_HOME") or str(Path("~/.wuu").expanduser())
    if not Path(text).is_absolute():
        raise ConfigurationError(f"{'--home' if given else 'WUU_HOME'}: {text!r} is not an absolute path")
    return Path(text)


def load_configuration(given: str | None, home: Path) -> Configuration:
    """The configuration `--config` names (`given`, which must be absolute), else the user configuration
    under `home` if it exists, else an empty one. ConfigurationError listing every problem of the file."""
    if given is not None:
        path = Path(given)
        if not path.is_absolute():
            raise ConfigurationError(f"--config: {given!r} is not an absolute path")
        return _read(path, f"--config: {path}", missing_ok=False)
    return _read(home / USER_CONFIGURATION, str(home / USER_CONFIGURATION), missing_ok=True)


def _read(path: Path, label: str, *, missing_ok: bool) -> Configuration:
    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text)
    except FileNotFoundError:
        if missing_ok:
            return Configuration()
        raise ConfigurationError(f"{label}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"{label}: {error}") from None
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{label}: line {error.lineno} column {error.colno}: {error.msg}") from None
    found = validators.errors("UserConfiguration", document)
    if found:
        problems = sorted(
            f"{label}: {'.'.join(str(part) for part in error.absolute_path) or 'the file'}: {error.message}"
            for error in found
        )
        raise ConfigurationError("\n".join(problems))
    # From the text: strict JSON validation takes an enum's value as its string.
    return Configuration(UserConfiguration.model_validate_json(text, strict=True), path, label)
