"""Which conversation an adapter serves: the identity a retained environment is kept under.

The host names the conversation in the adapter's environment (`WUU_CONVERSATION`). Without it, a
persistent profile serves one conversation, with an id derived from the profile's name (a later
connection finds the same environment), and any other profile a fresh random one per connection.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ProfileError
from ..profiles import Profile

CONVERSATION_VARIABLE = "WUU_CONVERSATION"
_CONVERSATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def conversation_id(profile: Profile[Any], environ: Mapping[str, str]) -> str:
    """`WUU_CONVERSATION`; else a stable id for a persistent profile, a fresh one otherwise. ProfileError
    for a conversation id that is not 1 to 64 letters, digits, '.', '_' or '-'."""
    given = environ.get(CONVERSATION_VARIABLE)
    if given is not None:
        if not _CONVERSATION.fullmatch(given):
            raise ProfileError(
                f"{CONVERSATION_VARIABLE}={given!r}: a conversation id is 1 to 64 letters, digits, "
                "'.', '_' or '-', starting with a letter or digit"
            )
        return given
    if profile.settings.persistent:
        return profile_conversation(profile)
    return uuid.uuid4().hex[:16]


def profile_conversation(profile: Profile[Any]) -> str:
    """The one conversation of a persistent profile whose host names none."""
    return "p-" + hashlib.sha256(profile.name.encode()).hexdigest()[:16]


def conversation_key(profile: Profile[Any], conversation: str) -> str:
    """16 hex digits that stand for the profile and the conversation in a retained resource's name."""
    return _digest(f"{profile.name}\0{conversation}")[:16]


def shared_environment(profile: Profile[Any]) -> str:
    """The identity of the one environment that the conversations of a `shared` profile use."""
    return "s-" + hashlib.sha256(profile.name.encode()).hexdigest()[:16]


def environment_directory(profile: Profile[Any], identity: str, environ: Mapping[str, str]) -> Path:
    """Where this machine keeps what belongs to environment `identity` of the profile (a workspace, a record of
    retained state): `$WUU_HOME/environments/<backend>/<profile>-<hash>/<identity>` (WUU_HOME: ~/.wuu)."""
    home = environ.get("WUU_HOME") or str(Path("~/.wuu").expanduser())
    return (
        Path(home)
        / "environments"
        / profile.backend
        / f"{label(profile)}-{_digest(profile.name)[:12]}"
        / identity
    )


def label(profile: Profile[Any]) -> str:
    """The profile's name as it can appear in a resource's name: letters, digits, '.', '_' and '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", profile.name).strip("-.")[:40] or "profile"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
