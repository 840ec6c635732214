"""The cloud backends, `modal`, `daytona` and `vercel`: the worker runs in the provider's sandbox, provisioned
through the provider's official Python SDK (`modal`, `daytona`, `vercel-sandbox`: optional extras, never
installed by default).

The SDK's calls are in the host transport, `cloud_transport.py`, a program of its own that this backend runs
as a child process with the worker's stdio: `PYTHON -I cloud_transport.py CONFIG`. PYTHON is the profile's
`python` (an interpreter whose environment has the SDK), else the host's own, which then must have the SDK
(`pip install 'wuu[modal]'`, etc.). CONFIG is the transport's Config, built here from the profile
(ModalExecutionProfile, DaytonaExecutionProfile, VercelExecutionProfile in
spec/schema/config/execution_environments.schema.json):

- the sandbox's name: `wuu-<profile>-<hash of the profile and the conversation>` when `persistent` (a later
  connection of the conversation finds what was retained), else `wuu-<profile>-<random>`;
- `cpus` and `memory_mb` as the provider counts them (Daytona: whole cores, whole GiB rounded up; Vercel:
  whole vCPUs, memory following them), `network: none` as the provider's isolation (Modal `block_network`,
  Daytona `network_block_all`, Vercel a deny-all network policy), `lifetime_seconds` as the sandbox's
  lifetime (Modal `timeout`, Daytona's auto-stop interval in minutes, Vercel's execution time limit);
- Modal's retained snapshot is recorded in `$WUU_HOME/environments/modal/<profile>-<hash>/<conversation>.json`.

`shared` is refused for these backends: a cloud sandbox shared by conversations is not available yet.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from wuu.generated.plain import DaytonaExecutionProfile, ModalExecutionProfile, VercelExecutionProfile

from ..errors import BackendUnavailable
from ..profiles import Profile
from .base import ChildProcess
from .conversations import conversation_id, conversation_key, environment_directory, label

CloudProfile = ModalExecutionProfile | DaytonaExecutionProfile | VercelExecutionProfile
TRANSPORT = str(Path(__file__).with_name("cloud_transport.py"))
SDK_MODULES = {"modal": "modal", "daytona": "daytona", "vercel": "vercel.sandbox"}
"""The module each backend's SDK provides, looked for when the transport runs in the host's interpreter."""


class CloudEnvironment(ChildProcess):
    """A cloud sandbox with the worker in it, driven by the host transport."""

    def __init__(self, profile: Profile[CloudProfile], environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        settings = profile.settings
        backend = profile.backend
        if settings.shared:
            raise BackendUnavailable(
                f"profile {profile.name!r}: shared: a {backend} sandbox shared by conversations is not "
                "available yet (omit `shared`: each conversation gets its own)"
            )
        if settings.python is None and not _has_module(SDK_MODULES[backend]):
            raise BackendUnavailable(
                f"profile {profile.name!r}: the {backend} backend needs its SDK: pip install 'wuu[{backend}]', "
                "or name an interpreter that has it in the profile's `python`"
            )
        conversation = conversation_id(profile, environ)
        key = conversation_key(profile, conversation) if settings.persistent else secrets.token_hex(8)
        state = None
        if backend == "modal" and settings.persistent:
            state = str(environment_directory(profile, conversation, environ)) + ".json"
        self.config = {
            "backend": backend,
            "image": settings.image,
            "cpus": settings.cpus,
            "memory_mb": getattr(settings, "memory_mb", None),
            "network": settings.network.value,
            "lifetime_seconds": settings.lifetime_seconds,
            "persistent": settings.persistent,
            "worker": list(settings.worker) if settings.worker else None,
            "name": f"wuu-{label(profile)[:24]}-{key}",
            "state": state,
        }
        python = settings.python or sys.executable
        super().__init__([python, "-I", TRANSPORT, json.dumps(self.config)])


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
