"""The spec's examples and defs, as the tests read them (from the installed package's bundled spec)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tests.helpers import ROOT
from wuu.generated import models, validators

SPEC = ROOT / "spec"


@dataclass(frozen=True)
class Example:
    name: str
    area: str
    number: int
    description: str
    instance: Any
    field: str | None

    @property
    def id(self) -> str:
        return f"{self.area}/{self.name}[{self.number}]"


def examples(kind: str) -> list[Example]:
    """Every valid or invalid example of spec/examples/."""
    found = []
    for path in sorted((SPEC / "examples").glob("*/*.json")):
        document = json.loads(path.read_text("utf-8"))
        for number, example in enumerate(document.get(kind, [])):
            found.append(
                Example(
                    path.stem,
                    path.parent.name,
                    number,
                    example["description"],
                    example["instance"],
                    example.get("field"),
                )
            )
    return found


def adapter(name: str) -> TypeAdapter[Any]:
    """The generated type of def `name`: a model, an enum or a named union or scalar."""
    return TypeAdapter(getattr(models, name))


def defs() -> dict[str, Any]:
    found: dict[str, Any] = validators.bundle()["$defs"]
    return found


def roundtrip(name: str, instance: Any) -> Any:
    """Decode JSON text of `instance` strictly, as the wire does, and encode it again."""
    type_adapter = adapter(name)
    decoded = type_adapter.validate_json(json.dumps(instance), strict=True)
    return type_adapter.dump_python(decoded, mode="json", by_alias=True, exclude_unset=True)


def pydantic_error_paths(error: ValidationError, instance: Any) -> set[str]:
    """The dotted wire paths a pydantic error points at.

    Location parts that are not keys or indexes of the instance (union branch names and tags,
    `[key]`) are dropped. A missing or unknown field is located at the field and at the object that
    lacks or has it, as JSON Schema locates it; so is a bad key of a map and a bad discriminator. An
    error raised by a model-level check names its field at the start of its message.
    """
    paths = set()
    for detail in error.errors():
        parts, node = [], instance
        for part in detail["loc"]:
            in_dict = isinstance(node, dict) and part in node
            in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
            if in_dict or in_list:
                parts.append(str(part))
                node = node[part]
        paths.add(".".join(parts))
        if detail["type"] == "missing":
            paths.add(".".join([*parts, str(detail["loc"][-1])]))
        if detail["type"] == "extra_forbidden":
            paths.add(".".join(parts[:-1]))
        if detail["type"] in ("union_tag_invalid", "union_tag_not_found"):
            paths.add(".".join([*parts, detail["ctx"]["discriminator"].strip("'")]))
        if detail["loc"] and detail["loc"][-1] == "[key]":
            paths.add(".".join(parts[:-1]))
        head, sep, _ = detail["msg"].removeprefix("Value error, ").partition(": ")
        if sep and " " not in head:
            paths.add(".".join([*parts, head]) if parts else head)
    return paths


def jsonschema_error_paths(name: str, instance: Any) -> set[str]:
    return validators.error_locations(validators.errors(name, instance))
