"""The suites' requirement registries (`requirements.json` files) and the cases that check each requirement."""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from wuu.generated.models import ConformanceRequirements, RequirementTier


@dataclass(frozen=True)
class Requirement:
    """One observable rule of the spec."""

    id: str
    tier: RequirementTier
    spec: str
    description: str
    applies_to: str | None

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def spec_text(self) -> str:
        """The spec's own words for the rule: the description the pointer names."""
        return spec_text(self.spec)


@functools.cache
def _source(file: str) -> Any:
    area, name = file.split("/")
    text = resources.files("wuu.generated").joinpath("schema", "source", area, name).read_text("utf-8")
    return json.loads(text)


def spec_text(pointer: str) -> str:
    """The spec's words at `file#/json/pointer` in its schema files: the `description` of the node named, or
    the node itself when it is text (an entry of `x-enum-descriptions`, which states what each code means)."""
    file, _, path = pointer.partition("#")
    node = _source(file)
    for part in [p for p in path.split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node if isinstance(node, str) else str(node["description"])


class CaseSession(Protocol):
    """What the runner needs of a suite's session: one fresh implementation process for one case."""

    async def start(self) -> None: ...

    async def probe(self) -> None:
        """Start the command once and wait for the answer to its first request; StartFailure if none comes."""

    def transcript(self) -> str: ...

    async def close(self) -> None: ...


SessionFactory = Callable[[Sequence[str], Path, float], CaseSession]
"""(the command under test, a fresh private directory for the case, the reply timeout) -> the session."""


@dataclass(frozen=True)
class Case:
    """One check, run against a fresh process of the command under test, in a fresh directory."""

    id: str
    requirements: tuple[str, ...]
    run: Callable[[Any], Awaitable[None]]
    doc: str
    suite: Suite

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(eq=False)
class Suite:
    """One protocol's conformance suite: its requirement registry, its cases and the session they run in."""

    name: str
    """The suite's name on the command line (`--suite`)."""
    title: str
    """What the suite checks, for reports."""
    registry: str
    """The requirement registry: a resource path inside this package, a file or a folder of files (one per
    area, read in name order)."""
    cases_package: str
    """The package whose modules hold the cases (one module per area)."""
    session: SessionFactory
    """Makes the session a case runs in."""
    _cases: dict[str, Case] = field(default_factory=dict)

    def case(self, *requirement_ids: str) -> Callable[[Callable[[Any], Awaitable[None]]], Any]:
        """Register a case for the requirements it checks. Its id is `<module>.<function-name>`."""

        def register(function: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
            area = function.__module__.rsplit(".", 1)[-1]
            case_id = f"{area}.{function.__name__.replace('_', '-')}"
            if case_id in self._cases:
                raise ValueError(f"case {case_id} is registered twice")
            doc = (function.__doc__ or "").strip()
            self._cases[case_id] = Case(case_id, requirement_ids, function, doc, self)
            return function

        return register

    def cases(self) -> dict[str, Case]:
        """Every case of the suite, by id (importing the cases package registers them)."""
        importlib.import_module(self.cases_package)
        return self._cases

    def requirements(self) -> dict[str, Requirement]:
        """Every requirement by id, in registry order."""
        return _requirements(self.registry)


@functools.cache
def _requirements(resource: str) -> dict[str, Requirement]:
    place = resources.files(__package__).joinpath(resource)
    files = [place]
    if place.is_dir():
        files = sorted((f for f in place.iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
    found: dict[str, Requirement] = {}
    for file in files:
        registry = ConformanceRequirements.model_validate_json(file.read_text("utf-8"), strict=True)
        for entry in registry.requirements:
            if entry.id in found:
                raise ValueError(f"requirement {entry.id} is listed twice ({file.name})")
            found[entry.id] = Requirement(
                entry.id, entry.tier, entry.spec, entry.description, entry.applies_to
            )
    return found
