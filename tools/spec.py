"""Load the spec: its schema files, method catalogs, examples and data, and bundle the schemas into one document."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"
SCHEMA_DIR = SPEC / "schema"
BUNDLE_ID = "https://schemas.wuu.dev/bundle.json"
ID_PREFIX = "https://schemas.wuu.dev/"


@dataclass(frozen=True)
class SchemaFile:
    """One schema file of spec/schema and its parsed document."""

    path: Path
    document: dict[str, Any]

    @property
    def area(self) -> str:
        """The spec area: the folder under spec/schema (`worker`, `userhost`, ...)."""
        return self.path.parent.name

    @property
    def relative(self) -> str:
        """The path under spec/schema, as problems name the file."""
        return self.path.relative_to(SCHEMA_DIR).as_posix()


def read_json(path: Path) -> Any:
    """A JSON file's content."""
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def schema_files() -> list[SchemaFile]:
    """Every schema file of spec/schema, sorted by path."""
    return [SchemaFile(path, read_json(path)) for path in sorted(SCHEMA_DIR.glob("*/*.schema.json"))]


def catalogs() -> dict[str, dict[str, Any]]:
    """The method catalogs by protocol name (`worker`, `userhost`)."""
    return {path.stem: read_json(path) for path in sorted((SPEC / "methods").glob("*.json"))}


def def_index(files: list[SchemaFile]) -> dict[str, SchemaFile]:
    """Which file defines each def; a name defined twice is an error."""
    index: dict[str, SchemaFile] = {}
    for file in files:
        for name in file.document.get("$defs", {}):
            if name in index:
                raise SpecError(f"def {name} is defined in both {index[name].relative} and {file.relative}")
            index[name] = file
    return index


class SpecError(Exception):
    """The spec breaks one of its own conventions."""


def resolve_ref(ref: str, file: SchemaFile, index: dict[str, SchemaFile]) -> str:
    """The def name a `$ref` in `file` points at."""
    target, _, pointer = ref.partition("#")
    if not pointer.startswith("/$defs/") or pointer.count("/") != 2:
        raise SpecError(f"{file.relative}: $ref {ref!r} must point at a def (#/$defs/Name)")
    name = pointer.removeprefix("/$defs/")
    target_path = (file.path.parent / target).resolve() if target else file.path
    owner = index.get(name)
    if owner is None or owner.path != target_path:
        raise SpecError(f"{file.relative}: $ref {ref!r} names no def of {target or file.relative}")
    return name


def _rewrite_refs(node: Any, file: SchemaFile, index: dict[str, SchemaFile]) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                out[key] = f"#/$defs/{resolve_ref(value, file, index)}"
            else:
                out[key] = _rewrite_refs(value, file, index)
        return out
    if isinstance(node, list):
        return [_rewrite_refs(item, file, index) for item in node]
    return node


def bundle(files: list[SchemaFile] | None = None) -> dict[str, Any]:
    """Every def of every schema file in one document, references rewritten to `#/$defs/Name`, sorted by name."""
    files = schema_files() if files is None else files
    index = def_index(files)
    defs = {}
    for name in sorted(index):
        file = index[name]
        defs[name] = _rewrite_refs(copy.deepcopy(file.document["$defs"][name]), file, index)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": BUNDLE_ID,
        "title": "WuuSpec",
        "description": "Every def of the Wuu protocol spec, bundled from spec/schema by `make generate`.",
        "$defs": defs,
    }


def area_of_defs(files: list[SchemaFile] | None = None) -> dict[str, list[str]]:
    """Def names by area (the schema folder they live in), sorted."""
    files = schema_files() if files is None else files
    areas: dict[str, list[str]] = {}
    for file in files:
        areas.setdefault(file.area, []).extend(file.document.get("$defs", {}))
    return {area: sorted(names) for area, names in sorted(areas.items())}


def method_row(entry: dict[str, Any]) -> str:
    """A catalog method as the source of its `MethodSpec` (in a table keyed by wire name), naming its models."""
    return (
        f"{entry['method']!r}: MethodSpec(method={entry['method']!r}, "
        f"direction={entry['direction']!r}, kind={entry['kind']!r}, params={entry['params']}, "
        f"result={entry['result'] or 'None'}, optional={entry['optional']!r}, "
        f"capability={entry['capability']!r}, description={entry['description']!r}, "
        f"user_input={entry.get('user_input', False)!r}),"
    )


def tool_row(tool: dict[str, Any]) -> str:
    """A catalog tool as the source of its `ToolSpec` (in a table keyed by tool name), naming its models."""
    return (
        f"{tool['tool']!r}: ToolSpec(tool={tool['tool']!r}, arguments={tool['arguments']}, "
        f"metadata={tool['metadata']}, mutating={tool['mutating']!r}, "
        f"runs_commands={tool['runs_commands']!r}, description={tool['description']!r}),"
    )
