"""Check that spec/ keeps its own conventions (spec/README.md) and that its examples say what they claim.

Usage: python -m tools.speclint    (from the repository root; exit 1 and one line per problem when anything is off)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from tools.spec import ID_PREFIX, SPEC, SchemaFile, SpecError, bundle, catalogs, read_json, schema_files
from tools.templates.keywords import (
    CODE_TABLES,
    GENERATOR_KEYWORDS,
    GRPC_STATUS,
    HTTP_STATUS,
    JSONRPC_NUMBER,
    SPEC_KEYWORDS,
)
from tools.templates.validators import compile_validator, error_locations

ROOT_KEYS = {"$schema", "$id", "title", "description", "$defs"}
PASCAL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
RFC3339_PATTERN = (
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
# The gRPC status codes but OK (grpc/doc/statuscodes.md), by name.
GRPC_STATUS_NAMES = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)
# What each table of CODE_TABLES maps a code to: (what one value is, its check).
CODE_TABLE_VALUES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    JSONRPC_NUMBER: ("an integer from -32768 to -32000", lambda v: type(v) is int and -32768 <= v <= -32000),
    HTTP_STATUS: ("an integer from 400 to 599", lambda v: type(v) is int and 400 <= v <= 599),
    GRPC_STATUS: ("the name of a gRPC status code other than OK", lambda v: v in GRPC_STATUS_NAMES),
}


def lint_file(file: SchemaFile) -> Iterator[str]:
    """The problems of one schema file: its root keys, its $id, and each of its defs."""
    doc, where = file.document, file.relative
    if set(doc) - ROOT_KEYS:
        yield f"{where}: unexpected root keys {sorted(set(doc) - ROOT_KEYS)}"
    if doc.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
        yield f"{where}: $schema must be draft 2020-12"
    if doc.get("$id") != ID_PREFIX + where:
        yield f"{where}: $id must be {ID_PREFIX + where}"
    for key in ("title", "description"):
        if not doc.get(key):
            yield f"{where}: the file needs a {key}"
    try:
        Draft202012Validator.check_schema(doc)
    except SchemaError as error:
        yield f"{where}: not a valid 2020-12 schema: {error}"
    for name, schema in doc.get("$defs", {}).items():
        yield from lint_def(f"{where}#/$defs/{name}", name, schema)


def lint_def(where: str, name: str, schema: dict[str, Any]) -> Iterator[str]:
    """The problems of one def: its name, title, description, enum and union rules, and its nodes."""
    if not PASCAL.match(name):
        yield f"{where}: def names are PascalCase"
    if schema.get("title") != name:
        yield f"{where}: title must equal the def name"
    if not schema.get("description"):
        yield f"{where}: needs a description"
    if "enum" in schema:
        if schema.get("type") != "string":
            yield f"{where}: enums are of type string"
        described = schema.get("x-enum-descriptions")
        if not isinstance(described, list) or len(described) != len(schema["enum"]) or not all(described):
            yield f"{where}: x-enum-descriptions is a list describing each enum value, in the enum's order"
    if "oneOf" in schema:
        for branch in schema["oneOf"]:
            if set(branch) != {"$ref"}:
                yield f"{where}: each oneOf branch is a bare $ref to a named def"
    for keyword in CODE_TABLES:
        if keyword in schema:
            yield from lint_code_table(where, schema, keyword)
    yield from lint_node(where, schema, top=True)


def lint_code_table(where: str, schema: dict[str, Any], keyword: str) -> Iterator[str]:
    """The problems of one of an enum's CODE_TABLES: one value of its kind for each of the enum's values."""
    table = schema[keyword]
    what, valid = CODE_TABLE_VALUES[keyword]
    if "enum" not in schema or not isinstance(table, dict) or set(table) != set(schema["enum"]):
        yield f"{where}: {keyword} stands on an enum and maps each of its values, and only those, to {what}"
    elif not all(valid(value) for value in table.values()):
        yield f"{where}: each {keyword} value is {what}"


def lint_node(where: str, node: dict[str, Any], top: bool = False) -> Iterator[str]:
    """The problems of one schema node and of the properties, items and values under it."""
    types = node.get("type")
    types = types if isinstance(types, list) else [types]
    if "object" in types:
        if "properties" in node and node.get("additionalProperties") not in (False, True):
            yield f"{where}: objects with properties are closed (additionalProperties: false) or open (true)"
        if node.get("additionalProperties") is True and not (top and "properties" in node):
            yield f"{where}: only a def with properties is open (additionalProperties: true)"
        if node.get("properties") and not top:
            yield f"{where}: an object with properties must be a named def, referenced by $ref"
        for prop, sub in node.get("properties", {}).items():
            at = f"{where}/properties/{prop}"
            sub_types = sub.get("type") if isinstance(sub.get("type"), list) else [sub.get("type")]
            if "null" in sub_types and prop not in node.get("required", []):
                yield f"{at}: a nullable field is required (null never means absent)"
            if not sub.get("description"):
                yield f"{at}: needs a description"
            if "enum" in sub:
                yield f"{at}: enums are named defs, not inline"
            yield from lint_node(at, sub)
        value_schema = node.get("additionalProperties")
        if isinstance(value_schema, dict):
            yield from lint_node(f"{where}/additionalProperties", value_schema)
    if "array" in types and isinstance(node.get("items"), dict):
        yield from lint_node(f"{where}/items", node["items"])
    if "integer" in types and ("minimum" not in node or "maximum" not in node):
        yield f"{where}: an integer states its minimum and maximum"
    if node.get("format") == "date-time" and node.get("pattern") != RFC3339_PATTERN:
        yield f"{where}: a date-time carries the RFC 3339 pattern of spec/README.md"
    if "contentEncoding" in node and node["contentEncoding"] != "base64":
        yield f"{where}: the only contentEncoding is base64"
    for keyword in SPEC_KEYWORDS:
        if keyword in node and not top and where.count("/properties/") != 1:
            yield f"{where}: {keyword} belongs on a def or directly on a property"
    for keyword in CODE_TABLES:
        if keyword in node and not top:
            yield f"{where}: {keyword} belongs on an enum def"
    for keyword in GENERATOR_KEYWORDS:
        # The validators do not know these keywords: written in spec/, only the models would check them.
        if keyword in node:
            yield f"{where}: {keyword} is added by the generator, never written in spec/"


class _Checker:
    def __init__(self) -> None:
        self.bundle = bundle()

    def errors(self, name: str, instance: Any) -> list[Any]:
        return list(compile_validator(self.bundle, name).iter_errors(instance))


def lint_examples(checker: _Checker) -> Iterator[str]:
    """Valid examples that are rejected, invalid ones accepted or rejected elsewhere, missing ones."""
    defs = checker.bundle["$defs"]
    seen: set[str] = set()
    for path in sorted((SPEC / "examples").glob("*/*.json")):
        where = path.relative_to(SPEC).as_posix()
        name = path.stem
        if name not in defs:
            yield f"{where}: names no def"
            continue
        seen.add(name)
        examples = read_json(path)
        if set(examples) - {"valid", "invalid"} or not examples.get("valid"):
            yield f"{where}: needs a non-empty `valid` list (and optionally `invalid`)"
            continue
        for number, example in enumerate(examples["valid"]):
            if not example.get("description"):
                yield f"{where}: valid[{number}] needs a description"
            for error in checker.errors(name, example.get("instance")):
                yield f"{where}: valid[{number}] is rejected: {error.json_path}: {error.message}"
        for number, example in enumerate(examples.get("invalid", [])):
            if not example.get("description") or "field" not in example:
                yield f"{where}: invalid[{number}] needs a description and a field"
                continue
            errors = checker.errors(name, example.get("instance"))
            if not errors:
                yield f"{where}: invalid[{number}] ({example['description']}) is accepted"
            elif example["field"] not in error_locations(errors):
                found = sorted(error_locations(errors))
                yield f"{where}: invalid[{number}] fails at {found}, not at {example['field']!r}"
    for name, schema in defs.items():
        is_message = schema.get("type") == "object" or "oneOf" in schema
        if is_message and name not in seen:
            yield f"examples/: def {name} has no examples"


def lint_catalogs(checker: _Checker) -> Iterator[str]:
    """Method catalogs that break the MethodCatalog def, name no def, or give a method a service it cannot
    have."""
    defs = checker.bundle["$defs"]
    for protocol, catalog in catalogs().items():
        where = f"methods/{protocol}.json"
        for error in checker.errors("MethodCatalog", catalog):
            yield f"{where}: {error.json_path}: {error.message}"
        names = [entry.get("method") for entry in catalog.get("methods", [])]
        if len(names) != len(set(names)):
            yield f"{where}: a method is listed twice"
        for entry in catalog.get("methods", []):
            # A plugin method is answered by its plugin, a notification by no one.
            if entry.get("kind") == "plugin_request" and "service" not in entry:
                yield f"{where}: {entry.get('method')}: a plugin_request method names its plugin's service"
            if entry.get("kind") == "notification" and "service" in entry:
                yield f"{where}: {entry.get('method')}: a notification has no service"
        for entry in catalog.get("methods", []) + catalog.get("tools", []):
            for key in ("params", "result", "arguments", "metadata"):
                ref = entry.get(key)
                if ref is not None and ref not in defs:
                    yield f"{where}: {entry.get('method') or entry.get('tool')}: {key} {ref} is no def"


def reachable(defs: dict[str, Any], names: set[str]) -> set[str]:
    """The defs `names` and every def they reference, directly or not."""
    found: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in found or name not in defs:
            continue
        found.add(name)
        pending.extend(_refs(defs[name]))
    return found


def _refs(node: Any) -> Iterator[str]:
    """The def names a schema node references (bundled `#/$defs/Name` references)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def lint_open_defs(checker: _Checker) -> Iterator[str]:
    """Open defs (`additionalProperties: true`) outside a tool's result metadata.

    Only result metadata is open for extension: a request (a method's params, a tool's arguments) stays
    closed, so that a field its receiver does not know, a policy field above all, is refused, never ignored.
    """
    defs = checker.bundle["$defs"]
    open_defs = {name for name, schema in defs.items() if schema.get("additionalProperties") is True}
    metadata, requests = set(), set()
    for catalog in catalogs().values():
        requests.update(entry["params"] for entry in catalog.get("methods", []))
        for tool in catalog.get("tools", []):
            metadata.add(tool["metadata"])
            requests.add(tool["arguments"])
    in_requests = reachable(defs, requests)
    for name in sorted(open_defs - reachable(defs, metadata)):
        yield f"$defs/{name}: only a tool's result metadata (and the defs inside it) is open"
    for name in sorted(open_defs & in_requests):
        yield f"$defs/{name}: is open but part of a request (a method's params or a tool's arguments)"


def lint_data(checker: _Checker) -> Iterator[str]:
    """Data files that break the def their `schema` names."""
    for path in sorted((SPEC / "data").glob("*.json")):
        document = read_json(path)
        name = document.get("schema") if isinstance(document, dict) else None
        if not isinstance(name, str) or name not in checker.bundle["$defs"]:
            yield f"data/{path.name}: `schema` must name the def the file follows"
            continue
        for error in checker.errors(name, document):
            yield f"data/{path.name}: {error.json_path}: {error.message}"


def problems() -> list[str]:
    """Every problem of spec/, one line each."""
    found: list[str] = []
    files = schema_files()
    for file in files:
        found.extend(lint_file(file))
    try:
        checker = _Checker()
    except SpecError as error:
        return [*found, str(error)]
    found.extend(lint_catalogs(checker))
    found.extend(lint_open_defs(checker))
    found.extend(lint_data(checker))
    found.extend(lint_examples(checker))
    return found


def main() -> int:
    """Print the problems; exit status 1 when there is any."""
    found = problems()
    for problem in found:
        print(problem)
    if found:
        print(f"speclint: {len(found)} problem(s)")
        return 1
    print("speclint: spec/ keeps its conventions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
