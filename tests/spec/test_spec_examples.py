"""Every example of spec/examples/ says what it claims, to both the jsonschema validators and the models."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.spec.specdata import (
    Example,
    defs,
    examples,
    jsonschema_error_paths,
    pydantic_error_paths,
    roundtrip,
)
from wuu.generated import validators

VALID = examples("valid")
INVALID = examples("invalid")


def test_every_message_has_a_valid_example() -> None:
    messages = {
        name for name, schema in defs().items() if schema.get("type") == "object" or "oneOf" in schema
    }
    assert messages - {example.name for example in VALID} == set()


def test_there_are_invalid_examples_in_every_area() -> None:
    assert {example.area for example in INVALID} >= {
        "worker",
        "userhost",
        "receipts",
        "config",
        "permissions",
    }


@pytest.mark.parametrize("example", VALID, ids=lambda e: e.id)
def test_valid_example_is_accepted_and_round_trips(example: Example) -> None:
    assert validators.errors(example.name, example.instance) == []
    assert roundtrip(example.name, example.instance) == example.instance


@pytest.mark.parametrize("example", INVALID, ids=lambda e: e.id)
def test_invalid_example_is_rejected_at_its_field(example: Example) -> None:
    assert example.field in jsonschema_error_paths(example.name, example.instance), example.description
    with pytest.raises(ValidationError) as raised:
        roundtrip(example.name, example.instance)
    assert example.field in pydantic_error_paths(raised.value, example.instance), raised.value.errors()
