"""`wuu-host adapter`: any backend as a command adapter, serving the v4 protocol on this process's stdio.

It provisions the profile's environment, starts the worker in it, and relays between the two with
`wuu.worker.relay` (frames to the worker, bytes back); the token and binding checks still happen in the
worker. One interceptor in that relay gives every `initialize` the binding the environment needs: the
environment's own rewrite first (the ssh backend binds the conversation's subdirectory in place of the
profile's workspace), then the profile's `forward_env` variables merged under the binding's own
`environment` (spec/schema/config/execution_environments.schema.json, ProfileForwardEnv). Both are the
same on every initialize, so an equal re-initialize stays equal.

At the host's EOF the worker gets EOF, and the profile's `shutdown_timeout_ms` bounds everything after
it; past the budget the transport is terminated and the failure reported (CleanupFailed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from wuu.generated.models import ExecutionProfile
from wuu.worker.relay import InitializeRewrite, Relay
from wuu.worker.streams import connect_pipes

from .backends import environment_for
from .backends.base import Environment
from .profiles import Profile


def initialize_interceptor(environment: Environment, forwarded: Mapping[str, str]) -> InitializeRewrite:
    """The rewrite of every `initialize`'s data: the environment's binding, then the forwarded variables.

    A binding whose `environment` is not an object is left to the worker to refuse.
    """

    def intercept(data: dict[str, Any]) -> dict[str, Any] | None:
        bound = environment.rewrite_initialize(data)
        given = bound.get("environment", {})
        if forwarded and isinstance(given, dict):
            bound = {**bound, "environment": {**forwarded, **given}}
        return None if bound is data else bound

    return intercept


async def serve_adapter(profile: Profile[ExecutionProfile], environ: Mapping[str, str] | None = None) -> None:
    """Serve one connection through the profile's environment. Raises CleanupFailed after a failed shutdown."""
    forwarded = profile.forwarded_environment(os.environ if environ is None else environ)
    environment = environment_for(profile)
    host_in, host_out, _ = await connect_pipes()
    worker_out, worker_in = await environment.start()
    relay = Relay(
        (host_in, host_out), (worker_out, worker_in), initialize_interceptor(environment, forwarded)
    )
    await relay.either_ended()
    budget = profile.settings.shutdown_timeout_ms / 1000
    relay.end_input()
    try:
        await environment.close(budget)
    finally:
        await relay.finish(budget)
        host_out.close()
