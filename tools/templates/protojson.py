"""Conversion between the spec's JSON messages and their proto3 twins.

The twin rules are those of spec/README.md ("proto3 twins"): a field's JSON name is the wire
property; enum values are `ENUM_NAME_VALUE`; a union is a message with one `oneof`; an absent
optional field and an unset `optional` proto field are the same, and so are a JSON `null` and an
unset field when the schema makes the property nullable. An empty optional list or map and an
absent one are the same message. The twin of an open def has the spec's fields only: extension keys
are left behind, as a host that ignores them would.
"""

from __future__ import annotations

import base64
import functools
import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from .validators import bundle, validator

_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]")
_FREE_FORM = {"google.protobuf.Struct", "google.protobuf.Value"}


def upper_snake(name: str) -> str:
    """`PermissionMode` -> `PERMISSION_MODE` (buf's rule for enum value prefixes)."""
    return _BOUNDARY.sub("_", name).upper()


def enum_value_name(enum_name: str, value: str) -> str:
    """The proto enum value that stands for the JSON enum value `value` of enum `enum_name`."""
    return f"{upper_snake(enum_name)}_{_NON_ALNUM.sub('_', value).upper()}"


def ref_name(schema: dict[str, Any]) -> str | None:
    """The def a property schema names: itself, its items, or its non-null branch."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if isinstance(schema.get("items"), dict):
        return ref_name(schema["items"])
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, []):
            found = ref_name(branch)
            if found:
                return found
    return None


def is_map(field: FieldDescriptor) -> bool:
    """Whether a proto field is a map."""
    return field.type == FieldDescriptor.TYPE_MESSAGE and bool(field.message_type.GetOptions().map_entry)


def is_repeated(field: FieldDescriptor) -> bool:
    """Whether a proto field is repeated (maps included)."""
    return bool(field.is_repeated)


@functools.cache
def _fields_by_json_name(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    return {field.json_name: field for field in descriptor.fields}


def _defs() -> dict[str, Any]:
    defs: dict[str, Any] = bundle()["$defs"]
    return defs


def union_branch(name: str, value: Any) -> str:
    """The branch of union def `name` that `value` validates against."""
    for branch in _defs()[name]["oneOf"]:
        branch_name = ref_name(branch)
        assert branch_name is not None
        if validator(branch_name).is_valid(value):
            return branch_name
    raise ValueError(f"the value matches no branch of {name}")


def to_proto(name: str, value: Any, message: Message) -> Message:
    """Fill `message`, the twin of def `name`, from the JSON value `value`; return it."""
    schema = _defs()[name]
    if "oneOf" in schema:
        branch = union_branch(name, value)
        for field in message.DESCRIPTOR.fields:
            if field.message_type is not None and field.message_type.name == branch:
                target = getattr(message, field.name)
                target.SetInParent()
                to_proto(branch, value, target)
                return message
        raise ValueError(f"{message.DESCRIPTOR.full_name} has no field for branch {branch}")
    fields = _fields_by_json_name(message.DESCRIPTOR)
    for prop, prop_value in value.items():
        if prop not in schema["properties"] and schema.get("additionalProperties") is True:
            continue  # an extension key of an open def: the twin has the spec's fields only
        _set(message, fields[prop], schema["properties"][prop], prop_value)
    return message


def _scalar_to_proto(field: FieldDescriptor, schema: dict[str, Any], value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_name[enum_value_name(field.enum_type.name, value)].number
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value, validate=True)
    return value


def _set(message: Message, field: FieldDescriptor, schema: dict[str, Any], value: Any) -> None:
    if value is None:
        return
    target = getattr(message, field.name)
    if is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        for key, item in value.items():
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                to_proto(_item_def(schema), item, target[key])
            else:
                target[key] = _scalar_to_proto(value_field, schema.get("additionalProperties", {}), item)
    elif is_repeated(field):
        for item in value:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                _fill_message(field, schema.get("items", {}), item, target.add())
            else:
                target.append(_scalar_to_proto(field, schema.get("items", {}), item))
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        target.SetInParent()
        _fill_message(field, schema, value, target)
    else:
        setattr(message, field.name, _scalar_to_proto(field, schema, value))


def _item_def(schema: dict[str, Any]) -> str:
    found = ref_name(schema.get("additionalProperties", {}))
    if found is None:
        raise ValueError("a map of messages needs a $ref to its value def")
    return found


def _fill_message(field: FieldDescriptor, schema: dict[str, Any], value: Any, target: Message) -> None:
    if field.message_type.full_name in _FREE_FORM:
        json_format.ParseDict(value, target)
        return
    found = ref_name(schema)
    if found is None:
        raise ValueError(f"{field.full_name}: a message field needs a $ref in the schema")
    to_proto(found, value, target)


def from_proto(name: str, message: Message) -> Any:
    """The JSON value of def `name` that the twin `message` stands for."""
    schema = _defs()[name]
    if "oneOf" in schema:
        oneofs = message.DESCRIPTOR.oneofs
        chosen = message.WhichOneof(oneofs[0].name) if oneofs else None
        if chosen is None:
            raise ValueError(f"{message.DESCRIPTOR.full_name}: no branch is set")
        field = message.DESCRIPTOR.fields_by_name[chosen]
        return from_proto(field.message_type.name, getattr(message, chosen))
    fields = _fields_by_json_name(message.DESCRIPTOR)
    required = set(schema.get("required", []))
    out: dict[str, Any] = {}
    for prop, prop_schema in schema.get("properties", {}).items():
        field = fields[prop]
        target = getattr(message, field.name)
        if is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                mapped = {key: from_proto(_item_def(prop_schema), item) for key, item in target.items()}
            else:
                mapped = {key: _scalar_from_proto(value_field, item) for key, item in target.items()}
            if mapped or prop in required:
                out[prop] = mapped
        elif is_repeated(field):
            items = [_value_from_proto(field, prop_schema.get("items", {}), item) for item in target]
            if items or prop in required:
                out[prop] = items
        elif field.has_presence and not message.HasField(field.name):
            if prop in required:
                out[prop] = None
        else:
            out[prop] = _value_from_proto(field, prop_schema, target)
    return out


def _value_from_proto(field: FieldDescriptor, schema: dict[str, Any], value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name in _FREE_FORM:
            return json_format.MessageToDict(value)
        found = ref_name(schema)
        if found is None:
            raise ValueError(f"{field.full_name}: a message field needs a $ref in the schema")
        return from_proto(found, value)
    return _scalar_from_proto(field, value)


def _scalar_from_proto(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return json_enum_value(field.enum_type, value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def json_enum_value(enum: EnumDescriptor, number: int) -> str:
    """The JSON value of the proto enum value `number`, by the spec's enum def of the same name."""
    proto_name = enum.values_by_number[number].name
    for value in _defs()[enum.name]["enum"]:
        if enum_value_name(enum.name, value) == proto_name:
            return str(value)
    raise ValueError(f"{enum.full_name}: {proto_name} stands for no value of the spec's {enum.name}")
