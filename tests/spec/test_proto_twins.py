"""Every message with a proto twin survives JSON -> protobuf bytes -> JSON, through both generated runtimes."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message

import wuu.generated.pb
from tests.spec.specdata import Example, defs, examples
from wuu.generated import protojson

TWINNED_AREAS = {"permissions", "receipts", "userhost", "worker"}


def _import_all(package: Any) -> list[Any]:
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        if info.name.endswith("_pb2")
    ]


PB_MODULES = _import_all(wuu.generated.pb)


def twin_class(name: str) -> type[Message]:
    for module in PB_MODULES:
        descriptor = module.DESCRIPTOR.message_types_by_name.get(name)
        if descriptor is not None:
            return message_factory.GetMessageClass(descriptor)
    raise LookupError(f"no proto twin named {name}")


def normalized(name: str, value: Any) -> Any:
    """`value` with empty optional lists and maps dropped (the twin cannot tell them from absent ones), and
    the extension keys of open defs (the twin has the spec's fields only)."""
    schema = defs()[name]
    if "oneOf" in schema:
        return normalized(protojson.union_branch(name, value), value)
    required = set(schema.get("required", []))
    out = {}
    for prop, item in value.items():
        if prop not in schema["properties"]:
            assert schema.get("additionalProperties") is True, f"{name} is closed but has {prop}"
            continue
        prop_schema = schema["properties"][prop]
        if prop not in required and item in ([], {}) and _is_collection(prop_schema):
            continue
        out[prop] = _normalized_item(prop_schema, item)
    return out


def _is_collection(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "array" or isinstance(schema.get("additionalProperties"), dict)


def _normalized_item(schema: dict[str, Any], item: Any) -> Any:
    target = protojson.ref_name(schema)
    if target is None or not ("properties" in defs()[target] or "oneOf" in defs()[target]):
        return item
    if isinstance(item, list):
        return [normalized(target, element) for element in item]
    if isinstance(item, dict) and _is_collection(schema):
        return {key: normalized(target, element) for key, element in item.items()}
    if isinstance(item, dict):
        return normalized(target, item)
    return item


TWINNED = [
    example
    for example in examples("valid")
    if example.area in TWINNED_AREAS
    and ("properties" in defs()[example.name] or "oneOf" in defs()[example.name])
]


def test_every_twinned_area_has_examples() -> None:
    assert {example.area for example in TWINNED} == TWINNED_AREAS


@pytest.mark.parametrize("example", TWINNED, ids=lambda e: e.id)
def test_json_proto_json_round_trip(example: Example) -> None:
    cls = twin_class(example.name)
    message = protojson.to_proto(example.name, example.instance, cls())
    decoded = cls.FromString(message.SerializeToString(deterministic=True))
    assert protojson.from_proto(example.name, decoded) == normalized(example.name, example.instance)


@pytest.mark.parametrize("example", TWINNED, ids=lambda e: e.id)
def test_betterproto_reads_and_writes_the_same_bytes(example: Example) -> None:
    cls = twin_class(example.name)
    wire = protojson.to_proto(example.name, example.instance, cls()).SerializeToString(deterministic=True)
    package = cls.DESCRIPTOR.file.package
    betterproto_module = importlib.import_module(f"wuu.generated.betterproto.{package}")
    twin = getattr(betterproto_module, example.name).parse(wire)
    assert cls.FromString(bytes(twin)) == cls.FromString(wire)
