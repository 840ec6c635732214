"""`wuu-host adapter`: any backend as a command adapter, serving the v4 protocol on this process's stdio.

It provisions the profile's environment, starts the worker in it, and relays between the two with
`wuu.worker.relay` (frames to the worker, bytes back); the token and binding checks still happen in the
worker. One interceptor in that relay gives every `initialize` the binding the environment needs: the
environment's own rewrite first (the ssh backend binds the conversation's subdirectory in place of the
profile's workspace), then the profile's `forward_env` variables merged under the binding's own
`environment` (spec/schema/config/execution_environments.schema.json, ProfileForwardEnv). Both are the
same on every initialize, so an equal re-initialize stays equal.

At the host's EOF the worker gets EOF, and the profile's `shutdown_timeout_ms` bounds everything after
it; past the budget the transport is terminated and the failure reported (CleanupFailed). SIGTERM and
SIGINT end the connection the same way, at any point: the worker gets EOF, its environment is cleaned up
within the same budget, and the exit status follows the same rules (a signal during provisioning lets it
finish, then shuts down at once). A second signal changes nothing: the budget already bounds the rest.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wuu.generated.plain import ExecutionProfile

from .backends import environment_for
from .backends.base import Environment
from .prestart import Prestarted
from .profiles import Profile

if TYPE_CHECKING:
    from wuu.worker.relay import InitializeRewrite

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals that end a connection like the host's EOF."""


def initialize_interceptor(
    environment: Environment,
    forwarded: Mapping[str, str],
    file_roots: Sequence[Mapping[str, Any]] = (),
    *,
    no_tcp: bool = False,
) -> InitializeRewrite:
    """The rewrite of every `initialize`'s data: the environment's binding, then the forwarded variables,
    then the profile's `file_roots` where the binding names none, and its `command_network: no_tcp`.

    A binding whose `environment` is not an object is left to the worker to refuse.
    """

    def intercept(data: dict[str, Any]) -> dict[str, Any] | None:
        bound = environment.intercept(data)
        given = bound.get("environment", {})
        if forwarded and isinstance(given, dict):
            bound = {**bound, "environment": {**forwarded, **given}}
        if file_roots and "file_roots" not in bound:
            bound = {**bound, "file_roots": [dict(root) for root in file_roots]}
        if no_tcp and bound.get("command_network") != "no_tcp":
            bound = {**bound, "command_network": "no_tcp"}
        return None if bound is data else bound

    return intercept


async def serve_adapter(
    profile: Profile[ExecutionProfile],
    environ: Mapping[str, str] | None = None,
    prestarted: Prestarted | None = None,
) -> None:
    """Serve one connection through the profile's environment. Raises CleanupFailed after a failed shutdown.

    A `prestarted` worker (`wuu.host.prestart`) serves it when it runs the profile's command.
    """
    forwarded = profile.forwarded_environment(os.environ if environ is None else environ)
    environment = environment_for(profile, prestarted)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    try:
        worker_out, worker_in = await environment.start()
        # Imported once the worker is starting, so that the worker's own start hides their cost.
        from wuu.worker.relay import Relay
        from wuu.worker.streams import connect_pipes

        host_in, host_out, _ = await connect_pipes()
        relay = Relay(
            (host_in, host_out),
            (worker_out, worker_in),
            initialize_interceptor(environment, forwarded, profile.file_roots(), no_tcp=profile.no_tcp()),
        )
        await relay.either_ended(stop)
        budget = profile.settings.shutdown_timeout_ms / 1000
        relay.end_input()
        try:
            await environment.close(budget)
        finally:
            await relay.finish(budget)
            host_out.close()
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
