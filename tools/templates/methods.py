"""The shapes of the method catalogs: one `MethodSpec` per method, one `ToolSpec` per core workspace tool.

They name their models by class: the pydantic models in `catalog`'s tables, their plain twins in `plain`'s
(the worker's own). This module imports only `typing`, so that either table, and the protocol constants
beside them, load without pydantic. They are named tuples, not dataclasses: a dataclass costs a millisecond
to define, and every worker's start-up defines these.
"""

from __future__ import annotations

from typing import Generic, NamedTuple, TypeVar

M = TypeVar("M")


class MethodSpec(NamedTuple, Generic[M]):
    """One method of a protocol, from the spec's method catalog, naming its models of kind `M`."""

    method: str
    direction: str
    kind: str
    params: type[M]
    result: type[M] | None
    optional: bool
    capability: str | None
    description: str
    user_input: bool = False
    """A plugin method that takes the host-owned `user_input` envelope."""


class ToolSpec(NamedTuple, Generic[M]):
    """One core workspace tool of `execute`, from the spec's method catalog, naming its models of kind `M`."""

    tool: str
    arguments: type[M]
    metadata: type[M]
    mutating: bool
    runs_commands: bool
    description: str
