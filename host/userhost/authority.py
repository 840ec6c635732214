"""The user host's execution authority: one binding for the process's life, its composition graph, the
clients attached to it and the work they admitted (spec/schema/userhost/initialize.schema.json).

`UserHost.start` is the embedding API's entry: it checks the binding, the isolation mode and the directories
that already exist under the home, and only then creates the space's storage (private whatever the umask),
so a host that cannot start writes nothing. It then takes the space's presence lock exclusively for its
whole life, before any module cleans or opens stored state: one authority per home, user space and product
domain. Clients attach through transports (`attach`) and detach; admitted work runs on the authority
(`admit`) and finishes whether or not any client is attached, until `close`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.generated import validators
from wuu.generated.catalog import USERHOST_MAX_CLIENT_TRANSPORTS
from wuu.generated.models import (
    PluginClientInvalidateParams,
    UserHostErrorCode,
    UserHostHostIsolation,
    UserHostIsolation,
    UserHostIsolationMode,
    UserHostMemoryIsolation,
    UserHostServerInfo,
)

from .errors import UserHostError, UserHostStartError
from .event_loop import running_kind
from .plugins import Graph, Plugin
from .private import UnsafeDirectory, check_directories, make_directories
from .services import HostServices, NoHostServices
from .session import ClientSession
from .storage.layout import StorageLayout
from .storage.presence import PresenceHeld, PresenceLock

log = logging.getLogger("wuu.host.userhost")

SERVER_INFO = UserHostServerInfo(name="wuu-userhost", version="0.1.0")
IsolationVerifier = Callable[[StorageLayout], bool | Awaitable[bool]]
"""A trusted embedding's isolation verifier: given where the space's state would live, whether the host is
isolated as `verified_host` promises. Raising counts as a failed verification."""


def _pattern(name: str) -> re.Pattern[str]:
    schema = validators.bundle()["$defs"]["UserHostInitializeResult"]["properties"][name]
    return re.compile(schema["pattern"])


@dataclass(frozen=True)
class Composition:
    """What a composition module adds to a host: its plugins, and how to release its state when the host
    closes (after the host's admitted work has stopped)."""

    plugins: Sequence[Plugin]
    close: Callable[[], Awaitable[None]] | None = None
    services: HostServices | None = None
    """The module's providers of the host's question and push methods, if it has them."""


Composer = Callable[["UserHost"], Awaitable[Composition]]
"""Builds a composition module on a started host, once the space's storage exists (a durable store opens
its files here, never before the host's binding and isolation checks)."""


class UserHost:
    """One user host's execution authority. Build it with `UserHost.start`."""

    def __init__(
        self,
        *,
        user_space_id: str,
        product_domain: str,
        composition_profile: str | None,
        isolation: UserHostIsolation,
        layout: StorageLayout,
        plugins: Iterable[Plugin],
        services: HostServices,
        presence: PresenceLock | None = None,
    ) -> None:
        self.user_space_id = user_space_id
        self.product_domain = product_domain
        self.composition_profile = composition_profile
        self.isolation = isolation
        self.layout = layout
        self.services = services
        self.server_info = SERVER_INFO
        self._graph = Graph(1, _by_id(plugins))
        self._sessions: set[ClientSession] = set()
        # A set, not a TaskGroup: `start` and `close` are separate calls of the embedding API, so no one
        # coroutine spans the host's life, and a failed work is logged without ending the others.
        self._work: set[asyncio.Task[None]] = set()
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._closed = False
        self._presence = presence

    @classmethod
    async def start(
        cls,
        *,
        user_space_id: str,
        product_domain: str,
        home: Path,
        composition_profile: str | None = None,
        isolation: str = UserHostIsolationMode.LOGICAL_MEMORY.value,
        verifier: IsolationVerifier | None = None,
        plugins: Iterable[Plugin] = (),
        services: HostServices | None = None,
        compose: Sequence[Composer] = (),
    ) -> UserHost:
        """Bind a host to one user space and product domain, check its isolation, then create its storage
        and build the composition: the `plugins` given, then each module of `compose` in order.

        Raises UserHostStartError (`user_host_binding_required`, `unknown_isolation_mode`,
        `user_host_isolation_required`, `user_host_storage_unsafe`) before anything is written under `home`.
        Once the storage exists the host holds the state folder's presence lock exclusively for its whole
        life, before any module runs: `user_host_already_running` while another host (named by its process
        ID and transports) or a maintenance command (the review-ledger migration) holds it. A module that
        fails to build fails the start; the modules built before it are closed. A started host records
        itself next to the lock; `announce` adds its transports.
        """
        if not _pattern("user_space_id").fullmatch(user_space_id or ""):
            raise UserHostStartError(
                UserHostErrorCode.USER_HOST_BINDING_REQUIRED,
                f"user space {user_space_id!r} is not a valid id",
            )
        if not _pattern("product_domain").fullmatch(product_domain or ""):
            raise UserHostStartError(
                UserHostErrorCode.USER_HOST_BINDING_REQUIRED,
                f"product domain {product_domain!r} is not valid",
            )
        if not home.is_absolute():
            raise UserHostStartError(
                UserHostErrorCode.USER_HOST_BINDING_REQUIRED, f"home {home} is not absolute"
            )
        if composition_profile is not None and not _pattern("composition_profile").fullmatch(
            composition_profile
        ):
            raise ValueError(f"composition profile {composition_profile!r} is not a valid name")
        try:
            mode = UserHostIsolationMode(isolation)
        except ValueError:
            known = ", ".join(m.value for m in UserHostIsolationMode)
            raise UserHostStartError(
                UserHostErrorCode.UNKNOWN_ISOLATION_MODE, f"isolation {isolation!r} is not one of {known}"
            ) from None
        layout = StorageLayout.under(home, user_space_id, product_domain)
        verified = mode is UserHostIsolationMode.VERIFIED_HOST
        if verified:
            await _verify(verifier, layout)
        try:
            check_directories(layout.directories)
            make_directories(layout.state)  # the lock's folder: where another authority holds it, it exists
        except UnsafeDirectory as error:
            raise UserHostStartError(UserHostErrorCode.USER_HOST_STORAGE_UNSAFE, str(error)) from None
        try:
            presence = PresenceLock.acquire(layout.state)
        except PresenceHeld as held:
            raise UserHostStartError(
                UserHostErrorCode.USER_HOST_ALREADY_RUNNING,
                f"user space {user_space_id!r}, product domain {product_domain!r} already has its authority "
                f"under {home}: {held}; one host serves a user space and product domain at a time, so stop "
                "it first or connect to it",
            ) from None
        host_isolation = UserHostHostIsolation.VERIFIED if verified else UserHostHostIsolation.UNVERIFIED
        try:
            make_directories(layout.files)
            host = cls(
                user_space_id=user_space_id,
                product_domain=product_domain,
                composition_profile=composition_profile,
                isolation=UserHostIsolation(memory=UserHostMemoryIsolation.LOGICAL, host=host_isolation),
                layout=layout,
                plugins=plugins,
                services=services or NoHostServices(),
                presence=presence,
            )
        except BaseException:
            presence.release()
            raise
        composed = list(host._graph.plugins.values())
        try:
            for module in compose:
                composition = await module(host)
                composed.extend(composition.plugins)
                if composition.close is not None:
                    host._closers.append(composition.close)
                if composition.services is not None:
                    host.services = composition.services
                host._graph = Graph(1, _by_id(composed))
            presence.record(())
        except BaseException:
            await host.close()
            raise
        log.info(
            "user host started",
            extra={
                "user_space_id": user_space_id,
                "product_domain": product_domain,
                "isolation": mode.value,
                "event_loop": running_kind(),
            },
        )
        return host

    def announce(self, transports: Sequence[str]) -> None:
        """Record the transports the host serves (`unix:PATH`, `grpc ADDRESS`, `http ADDRESS`, `stdio`),
        so that a host refused on the same space and domain names them."""
        if self._presence is not None and not self._closed:
            self._presence.record(transports)

    # --- the composition graph -------------------------------------------------------------------

    @property
    def graph(self) -> Graph:
        """The current composition graph."""
        return self._graph

    def replace_plugins(self, plugins: Iterable[Plugin]) -> Graph:
        """Install another plugin inventory as the next graph generation. Connections that captured an
        older generation get `graph_generation_changed` for their plugin calls from now on."""
        self._graph = Graph(self._graph.generation + 1, _by_id(plugins))
        return self._graph

    # --- clients ---------------------------------------------------------------------------------

    def attach(
        self,
        transport: str,
        send: Callable[[dict[str, Any]], None],
        close: Callable[[], None],
        device_id: str | None = None,
    ) -> ClientSession:
        """A new client connection: `send` queues one message to it, `close` ends its transport; `device_id`
        is the device its transport authenticated (a device token's), if any.

        UserHostError `too_many_clients` when the host already has its maximum of client transports.
        """
        if self._closed:
            raise UserHostError(UserHostErrorCode.INTERNAL, "the user host is closing")
        if len(self._sessions) >= USERHOST_MAX_CLIENT_TRANSPORTS:
            raise UserHostError(
                UserHostErrorCode.TOO_MANY_CLIENTS,
                f"the host already serves {USERHOST_MAX_CLIENT_TRANSPORTS} client transports",
            )
        session = ClientSession(self, transport, send, close, device_id)
        self._sessions.add(session)
        log.info("client attached", extra={"transport": transport, "clients": len(self._sessions)})
        return session

    def detached(self, session: ClientSession) -> None:
        """A client's transport has ended (called by the session)."""
        if session in self._sessions:
            self._sessions.remove(session)
            log.info(
                "client detached", extra={"transport": session.transport, "clients": len(self._sessions)}
            )

    @property
    def clients(self) -> int:
        """How many client transports are attached."""
        return len(self._sessions)

    def notify(self, params: PluginClientInvalidateParams) -> int:
        """Send a `plugin/client/invalidate` notice to every client that captured its graph generation;
        how many it was sent to. Best-effort: a client that cannot take it is not waited for."""
        sent = 0
        for session in list(self._sessions):
            if session.graph is not None and session.graph.generation == params.graph_generation:
                session.notify("plugin/client/invalidate", params.to_wire())
                sent += 1
        return sent

    # --- admitted work ---------------------------------------------------------------------------

    def admit(self, work: Coroutine[Any, Any, None]) -> None:
        """Run work that clients admitted; it runs until it ends or the host closes, attached clients or not."""
        if self._closed:
            work.close()
            raise UserHostError(UserHostErrorCode.INTERNAL, "the user host is closing")
        task = asyncio.create_task(work)
        self._work.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._work.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("admitted work failed", exc_info=task.exception())

    async def wait_idle(self) -> None:
        """Wait until no admitted work is running."""
        while self._work:
            await asyncio.wait(set(self._work))

    async def close(self) -> None:
        """End the authority: detach every client, stop the work it still runs, close the composition's modules
        and release the presence lock."""
        self._closed = True
        for session in list(self._sessions):
            session.detach()
        for task in list(self._work):
            task.cancel()
        await asyncio.gather(*self._work, return_exceptions=True)
        try:
            for close in reversed(self._closers):
                await close()
        finally:
            self._closers.clear()
            if self._presence is not None:
                self._presence.release()
        log.info("user host closed")


def _by_id(plugins: Iterable[Plugin]) -> dict[str, Plugin]:
    found: dict[str, Plugin] = {}
    for plugin in plugins:
        if plugin.plugin_id in found:
            raise ValueError(f"plugin {plugin.plugin_id} is in the graph twice")
        found[plugin.plugin_id] = plugin
    return found


async def _verify(verifier: IsolationVerifier | None, layout: StorageLayout) -> None:
    """Run the embedding's verifier; UserHostStartError unless it verifies the host."""
    if verifier is None:
        raise UserHostStartError(
            UserHostErrorCode.USER_HOST_ISOLATION_REQUIRED,
            "verified_host needs a trusted isolation verifier from the embedding, and none was given",
        )
    try:
        verdict = verifier(layout)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as error:
        raise UserHostStartError(
            UserHostErrorCode.USER_HOST_ISOLATION_REQUIRED, f"the isolation verifier failed: {error}"
        ) from None
    if verdict is not True:
        raise UserHostStartError(
            UserHostErrorCode.USER_HOST_ISOLATION_REQUIRED, "the isolation verifier did not verify the host"
        )
