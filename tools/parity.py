"""Check that every JSON Schema message has its proto3 twin, field for field (spec/README.md, "proto3 twins").

Usage: python -m tools.parity    (from the repository root; exit 1 and one line per difference)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool

from tools.spec import SPEC, area_of_defs, bundle
from tools.templates.protojson import enum_value_name, is_map, is_repeated, ref_name

PROTO_DIR = SPEC / "proto"
# Areas whose messages travel over gRPC or are stored as protobuf, and so have twins.
TWINNED_AREAS = ("permissions", "receipts", "userhost", "worker")
# Areas without twins, and why.
UNTWINNED_AREAS = {
    "config": "the configuration files (the user configuration, execution environments, phone delivery) are local "
    "user files, never wire messages",
    "meta": "the method catalogs describe the protocols; they are not exchanged",
}
FREE_FORM = {"google.protobuf.Struct", "google.protobuf.Value"}
INTEGER_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
}


def load_pool() -> DescriptorPool:
    """Every .proto of spec/proto compiled by protoc, in a descriptor pool."""
    import grpc_tools  # type: ignore[import-untyped]

    files = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    well_known = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{PROTO_DIR}",
                f"-I{well_known}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                *files,
            ],
            check=True,
        )
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = DescriptorPool()
    for file in descriptor_set.file:
        pool.Add(file)
    return pool


def twins(pool: DescriptorPool) -> tuple[dict[str, Descriptor], dict[str, EnumDescriptor], list[str]]:
    """The spec's proto messages and enums by name (outside google.*), and duplicate names."""
    messages: dict[str, Descriptor] = {}
    enums: dict[str, EnumDescriptor] = {}
    duplicates = []
    for path in sorted(PROTO_DIR.rglob("*.proto")):
        file = pool.FindFileByName(path.relative_to(PROTO_DIR).as_posix())
        for message in file.message_types_by_name.values():
            if message.name in messages:
                duplicates.append(message.full_name)
            messages[message.name] = message
        for enum in file.enum_types_by_name.values():
            if enum.name in enums:
                duplicates.append(enum.full_name)
            enums[enum.name] = enum
    return messages, enums, duplicates


def scalar_type_ok(field: FieldDescriptor, schema: dict[str, Any], defs: dict[str, Any]) -> str | None:
    """Why `field` cannot carry values of `schema`, or None."""
    target = ref_name(schema) if "$ref" in schema else None
    if target and ("enum" in defs[target] or "properties" in defs[target] or "oneOf" in defs[target]):
        twin = field.enum_type if field.type == FieldDescriptor.TYPE_ENUM else field.message_type
        if twin is None or twin.name != target:
            return f"is {twin.full_name if twin else 'a scalar'}, the schema names {target}"
        return None
    if target:
        schema = {**defs[target], **{k: v for k, v in schema.items() if k != "$ref"}}
    types = schema.get("type")
    types = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    kind = types[0] if types else None
    if kind == "object":
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name in FREE_FORM:
            return None
        return "a free-form object is google.protobuf.Struct"
    if kind is None:
        if (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type.full_name == "google.protobuf.Value"
        ):
            return None
        return "a value of any JSON type is google.protobuf.Value"
    if kind == "string" and schema.get("contentEncoding") == "base64":
        return None if field.type == FieldDescriptor.TYPE_BYTES else "a base64 string is bytes"
    if kind == "string":
        return None if field.type == FieldDescriptor.TYPE_STRING else "a string is string"
    if kind == "boolean":
        return None if field.type == FieldDescriptor.TYPE_BOOL else "a boolean is bool"
    if kind == "number":
        return None if field.type == FieldDescriptor.TYPE_DOUBLE else "a number is double"
    if kind == "integer":
        if field.type not in INTEGER_RANGES:
            return "an integer is int32, int64, uint32 or uint64"
        low, high = INTEGER_RANGES[field.type]
        minimum = schema.get("minimum", -(2**63))
        maximum = schema.get("maximum", 2**63 - 1)
        if minimum < low or maximum > high:
            return f"the schema's range [{minimum}, {maximum}] does not fit"
        return None
    return f"the schema type {kind} has no proto mapping"


def check_object(
    name: str, schema: dict[str, Any], message: Descriptor, defs: dict[str, Any]
) -> Iterator[str]:
    """How the twin of a JSON object def differs from it, field for field."""
    by_json = {field.json_name: field for field in message.fields}
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    for missing in sorted(set(properties) - set(by_json)):
        yield f"{message.full_name}: no field has json_name {missing!r} (JSON {name}.{missing})"
    for extra in sorted(set(by_json) - set(properties)):
        yield f"{message.full_name}.{by_json[extra].name}: json_name {extra!r} is no property of JSON {name}"
    for prop in sorted(set(properties) & set(by_json)):
        field, prop_schema = by_json[prop], properties[prop]
        where = f"{message.full_name}.{field.name}"
        types = prop_schema.get("type")
        types = types if isinstance(types, list) else [types]
        nullable = "null" in types
        if is_map(field):
            if "object" not in types or not isinstance(prop_schema.get("additionalProperties"), dict):
                yield f"{where}: a map field needs a JSON map (additionalProperties schema)"
                continue
            problem = scalar_type_ok(
                field.message_type.fields_by_name["value"], prop_schema["additionalProperties"], defs
            )
        elif is_repeated(field):
            if "array" not in types:
                yield f"{where}: repeated, but JSON {name}.{prop} is no array"
                continue
            problem = scalar_type_ok(field, prop_schema.get("items", {}), defs)
        else:
            if "array" in types:
                yield f"{where}: JSON {name}.{prop} is an array; the field must be repeated"
                continue
            problem = scalar_type_ok(field, prop_schema, defs)
            optional = prop not in required or nullable
            if optional and not field.has_presence:
                yield f"{where}: JSON {name}.{prop} is optional or nullable; the field needs presence (`optional`)"
            if not optional and field.has_presence and field.type != FieldDescriptor.TYPE_MESSAGE:
                yield f"{where}: JSON {name}.{prop} is required and never null; the field is plain, not `optional`"
        if problem:
            yield f"{where}: {problem}"


def check_union(name: str, schema: dict[str, Any], message: Descriptor) -> Iterator[str]:
    """How the twin of a JSON union differs from it: one oneof with one field per branch."""
    branches = {str(ref_name(branch)) for branch in schema["oneOf"]}
    if len(message.oneofs) != 1 or len(message.fields) != len(message.oneofs[0].fields):
        yield f"{message.full_name}: the twin of union {name} is one oneof and nothing else"
        return
    types = {field.message_type.name if field.message_type else field.name for field in message.fields}
    if types != branches:
        yield f"{message.full_name}: oneof branches {sorted(types)} differ from JSON {name}'s {sorted(branches)}"


def check_enum(name: str, schema: dict[str, Any], enum: EnumDescriptor) -> Iterator[str]:
    """How the twin of a JSON enum differs from it: an UNSPECIFIED zero, then the values in order."""
    expected = [f"{enum_value_name(name, 'UNSPECIFIED')}"] + [
        enum_value_name(name, v) for v in schema["enum"]
    ]
    actual = [value.name for value in sorted(enum.values, key=lambda v: v.number)]
    if actual != expected:
        yield f"{enum.full_name}: values {actual} should be {expected}"
    if enum.values_by_number.get(0) is None or enum.values_by_number[0].name != expected[0]:
        yield f"{enum.full_name}: value 0 is {expected[0]}"


def differences() -> list[str]:
    """Every difference between spec/schema and spec/proto, one line each."""
    defs = bundle()["$defs"]
    messages, enums, duplicates = twins(load_pool())
    found = [f"{name}: defined twice in spec/proto" for name in duplicates]
    areas = area_of_defs()
    for area in areas:
        if area not in TWINNED_AREAS and area not in UNTWINNED_AREAS:
            found.append(f"schema area {area}: say in tools/parity.py whether it has proto twins")
    twinned = {name for area in TWINNED_AREAS for name in areas.get(area, [])}
    for name in sorted(twinned):
        schema = defs[name]
        if "enum" in schema:
            if name not in enums:
                found.append(f"JSON enum {name} has no proto twin")
            else:
                found.extend(check_enum(name, schema, enums[name]))
        elif "oneOf" in schema:
            if name not in messages:
                found.append(f"JSON union {name} has no proto twin")
            else:
                found.extend(check_union(name, schema, messages[name]))
        elif schema.get("type") == "object":
            if name not in messages:
                found.append(f"JSON message {name} has no proto twin")
            else:
                found.extend(check_object(name, schema, messages[name], defs))
    for name in sorted(set(messages) | set(enums)):
        if name not in twinned:
            found.append(f"proto {name} is the twin of no JSON def in {', '.join(TWINNED_AREAS)}")
    return found


def main() -> int:
    """Print the differences; exit status 1 when there is any."""
    found = differences()
    for line in found:
        print(line)
    if found:
        print(f"parity: {len(found)} difference(s) between spec/schema and spec/proto")
        return 1
    print("parity: every JSON message has its proto twin, field for field")
    return 0


if __name__ == "__main__":
    sys.exit(main())
