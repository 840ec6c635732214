"""The plugins of a user host's composition graph, as clients call them (spec/schema/userhost/plugin.schema.json).

A plugin serves some of the catalog's `plugin_request` methods (spec/methods/userhost.json): each handler
takes the method's typed params model and a `PluginCall`, and returns the method's typed result model.
The host validates the params, routes the call by plugin id and fingerprint, and answers with the result
or the `UserHostError` the handler raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from wuu.generated.catalog import USERHOST_METHODS
from wuu.generated.models import PluginInventoryEntry, UserInput
from wuu.generated.wire import WireModel

from .services import Caller


class PluginCall(Protocol):
    """What a plugin method sees of the call it serves."""

    @property
    def user_input(self) -> UserInput | None:
        """The exact user input of the call (for a method that takes it), from the client's transport."""

    @property
    def caller(self) -> Caller:
        """Who calls, as the client's transport established it."""

    @property
    def revoked(self) -> asyncio.Event:
        """Set when the call loses its live foreground authority: the client cancelled it, or its transport
        ended. Admitting new work needs that authority; work already admitted keeps running."""

    def admit(self, work: Coroutine[Any, Any, None]) -> None:
        """Run admitted work on the host: it outlives this call and its client, until the host closes.
        Raises `UserHostError(cancelled)` once the call's foreground authority is revoked."""


PluginHandler = Callable[[Any, PluginCall], Awaitable[WireModel]]
"""A plugin method: (its params model, the call) -> its result model."""


@dataclass(frozen=True)
class Plugin:
    """One plugin of a composition graph: its exact id, the fingerprint of its build, and its client methods.

    Every method name must be a `plugin_request` method of the catalog; the host rejects the plugin
    otherwise, so clients can only ever reach methods the spec defines.
    """

    plugin_id: str
    fingerprint: str
    methods: Mapping[str, PluginHandler] = field(default_factory=dict)

    def __post_init__(self) -> None:
        PluginInventoryEntry(
            plugin_id=self.plugin_id, fingerprint=self.fingerprint
        )  # the spec's id and length rules
        for method in self.methods:
            spec = USERHOST_METHODS.get(method)
            if spec is None or spec.kind != "plugin_request":
                raise ValueError(f"plugin {self.plugin_id}: {method!r} is not a plugin method of the spec")

    @property
    def entry(self) -> PluginInventoryEntry:
        """The plugin as `initialize` lists it."""
        return PluginInventoryEntry(plugin_id=self.plugin_id, fingerprint=self.fingerprint)


@dataclass(frozen=True)
class Graph:
    """A composition graph as one connection captures it at `initialize`: its generation and its plugins."""

    generation: int
    plugins: Mapping[str, Plugin]

    def inventory(self) -> list[PluginInventoryEntry]:
        """The callable plugins, ordered by id."""
        return [self.plugins[plugin_id].entry for plugin_id in sorted(self.plugins)]
