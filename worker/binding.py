"""The binding rule: an initialize is equal to the pinned one when its data is, defaults applied."""

from __future__ import annotations

from typing import Any

from wuu.generated.plain import InitializeParams


def binding_key(params: InitializeParams) -> dict[str, Any]:
    """A binding's value for comparison: defaults applied, omitted maps and lists empty, capabilities a set."""
    key = params.model_dump()
    key["identity"] = params.identity or {}
    key["environment"] = params.environment or {}
    key["capabilities"] = sorted(params.capabilities or ())
    key["file_roots"] = key["file_roots"] or []
    return key


def same_binding(first: InitializeParams, second: InitializeParams) -> bool:
    """Whether a repeated initialize carries an equal binding (else: binding_immutable)."""
    return binding_key(first) == binding_key(second)


def same_workspace_binding(bound: InitializeParams, reconnect: InitializeParams) -> bool:
    """Whether a later connection of a persistent worker binds what `bound` did: as `same_binding`, except
    that the reconnect may require the workspace to exist where the first connection did not."""
    key = binding_key(reconnect)
    key["require_existing_workspace"] = bound.require_existing_workspace
    return binding_key(bound) == key
