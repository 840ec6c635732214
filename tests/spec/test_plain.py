"""Differential test of the plain twins (`wuu.generated.plain`): they accept and refuse exactly what the schemas
and the pydantic models do.

For every def with a plain class, instances are generated from its schema (seeded), half of them mutated once
(a field dropped, an unknown key added, or a value replaced by arbitrary JSON, at any depth) so that much of
what is judged is invalid. jsonschema, the model and the plain class must agree on each; an accepted
instance must re-encode to the same JSON, and a refused one must be refused at a location jsonschema names.
The spec's own valid and invalid examples of these defs are judged too. `make test` judges 25 instances per
def, `make chaos` 1,000 (`WUU_DIFFERENTIAL_EXAMPLES`).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from pydantic import ValidationError

from tests.spec.specdata import defs, examples, jsonschema_error_paths, roundtrip
from tools.plain import Writer, closure
from wuu.generated import plain, validators

MODELS = sorted(
    name
    for name in plain.PLAIN_DEFS
    if isinstance(getattr(plain, name), type) and issubclass(getattr(plain, name), plain.PlainModel)
)
EXAMPLES_PER_KIND = int(os.environ.get("WUU_DIFFERENTIAL_EXAMPLES", "25"))
# What a frame can carry: orjson reads an integer beyond 64 bits as a float, and JSON has no infinities.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
SETTINGS = settings(
    max_examples=EXAMPLES_PER_KIND,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@functools.cache
def instances(name: str) -> st.SearchStrategy[Any]:
    """Instances of def `name` (hypothesis-jsonschema; given only the defs it reaches, which it reads each)."""
    reached = closure(defs(), [name])
    return from_schema({"$ref": f"#/$defs/{name}", "$defs": {each: defs()[each] for each in reached}})


def objects(node: Any) -> list[dict[str, Any]]:
    """Every JSON object in `node`, itself first."""
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(objects(value))
    return found


@st.composite
def mutated(draw: st.DrawFn, name: str) -> Any:
    """An instance of def `name` with one of its objects changed: a key dropped, added, or given any value."""
    instance = draw(instances(name))
    target = draw(st.sampled_from(objects(instance)))
    keys = sorted(target)
    action = draw(st.sampled_from(["drop", "add", "replace"] if keys else ["add"]))
    if action == "drop":
        del target[draw(st.sampled_from(keys))]
    elif action == "add":
        target[draw(st.text(min_size=1, max_size=8))] = draw(JSON)
    else:
        target[draw(st.sampled_from(keys))] = draw(JSON)
    return instance


def judge(name: str, instance: Any) -> bool:
    """Whether the three agree on `instance`, checked; whether it is valid."""
    text = json.dumps(instance)
    schema_ok = not validators.errors(name, instance)
    try:
        encoded = roundtrip(name, instance)
        model_ok = True
    except ValidationError:
        model_ok = False
    model = getattr(plain, name)
    try:
        decoded = model.model_validate(instance)
    except plain.Invalid as error:
        assert not schema_ok, f"plain {name} refuses what the schema accepts ({error}): {text}"
        assert not model_ok, f"plain {name} refuses what the model accepts ({error}): {text}"
        where = jsonschema_error_paths(name, instance)
        assert error.location in where, f"plain {name} locates {error} not at one of {sorted(where)}: {text}"
        return False
    assert schema_ok, f"plain {name} accepts what the schema refuses: {text}"
    assert model_ok, f"plain {name} accepts what the model refuses: {text}"
    assert decoded.to_wire() == instance == encoded
    assert model.model_validate_json(text) == decoded
    return True


def test_a_keyword_without_a_type_checks_only_values_of_its_own_type() -> None:
    writer = Writer({}, [], "")
    name = writer.checker("_check_Typeless", {"minimum": 1, "minLength": 2})
    namespace = dict(vars(plain))
    exec("\n\n\n".join(writer.functions.values()), namespace)
    check = namespace[name]
    assert check("xy", "") == "xy" and check(5, "") == 5 and check(True, "") is True and check([], "") == []
    with pytest.raises(plain.Invalid, match="is less than the minimum 1"):
        check(0, "")
    with pytest.raises(plain.Invalid, match="is shorter than 2 characters"):
        check("x", "")
    # A keyword the typeless checks do not guard stops the generator rather than check nothing.
    with pytest.raises(SystemExit, match=r"no type and uses \['pattern'\]"):
        Writer({}, [], "").checker("_check_Pattern", {"pattern": "^a$"})


def test_the_plain_twins_cover_the_worker_protocol() -> None:
    assert {
        "InitializeParams",
        "ProcessStartParams",
        "ProcessEvent",
        "ToolResult",
        "SensitivePathRules",
    } <= set(MODELS)
    assert "PermissionMode" in plain.PLAIN_DEFS and "ErrorCode" in plain.PLAIN_DEFS


@pytest.mark.parametrize("name", MODELS)
def test_plain_agrees_with_the_schema_and_the_model(name: str) -> None:
    verdicts: list[bool] = []

    @SETTINGS
    @given(st.one_of(instances(name), mutated(name)))
    def check(instance: Any) -> None:
        verdicts.append(judge(name, instance))

    check()
    assert True in verdicts and False in verdicts


VALID = [example for example in examples("valid") if example.name in MODELS]
INVALID = [example for example in examples("invalid") if example.name in MODELS]


@pytest.mark.parametrize("example", VALID + INVALID, ids=lambda example: example.id)
def test_plain_judges_the_spec_examples(example: Any) -> None:
    assert judge(example.name, example.instance) is (example in VALID)
