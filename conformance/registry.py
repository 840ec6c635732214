"""The requirement registry (requirements.json) and the cases that check each requirement."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from wuu.generated.models import ConformanceRequirements, RequirementTier

if TYPE_CHECKING:
    from .session import Session


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
def requirements() -> dict[str, Requirement]:
    """Every requirement by id, in registry order."""
    text = resources.files(__package__).joinpath("requirements.json").read_text("utf-8")
    registry = ConformanceRequirements.model_validate_json(text, strict=True)
    found: dict[str, Requirement] = {}
    for entry in registry.requirements:
        if entry.id in found:
            raise ValueError(f"requirement {entry.id} is listed twice")
        found[entry.id] = Requirement(entry.id, entry.tier, entry.spec, entry.description, entry.applies_to)
    return found


@functools.cache
def _source(file: str) -> Any:
    area, name = file.split("/")
    text = resources.files("wuu.generated").joinpath("schema", "source", area, name).read_text("utf-8")
    return json.loads(text)


def spec_text(pointer: str) -> str:
    """The `description` at `file#/json/pointer` in the spec's schema files."""
    file, _, path = pointer.partition("#")
    node = _source(file)
    for part in [p for p in path.split("/") if p]:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return str(node["description"])


CaseFunction = Callable[["Session"], Awaitable[None]]


@dataclass(frozen=True)
class Case:
    """One check, run against a fresh adapter process and a fresh workspace root."""

    id: str
    requirements: tuple[str, ...]
    run: CaseFunction
    doc: str

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]


CASES: dict[str, Case] = {}


def case(*requirement_ids: str) -> Callable[[CaseFunction], CaseFunction]:
    """Register a case for the requirements it checks. Its id is `<module>.<function-name>`."""

    def register(function: CaseFunction) -> CaseFunction:
        area = function.__module__.rsplit(".", 1)[-1]
        case_id = f"{area}.{function.__name__.replace('_', '-')}"
        if case_id in CASES:
            raise ValueError(f"case {case_id} is registered twice")
        CASES[case_id] = Case(case_id, requirement_ids, function, (function.__doc__ or "").strip())
        return function

    return register
