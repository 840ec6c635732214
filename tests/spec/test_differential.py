"""Differential test: instances generated from the worker schemas, judged by jsonschema and by the models.

For every worker message kind (the params and result of every catalog method, and every frame), at least
EXAMPLES_PER_KIND instances are generated from the schema (seeded, so every run sees the same ones). The
jsonschema validators and the pydantic models must agree on each, and an accepted instance must re-encode
to the same JSON. `make test` generates 100 per kind; the long campaign, `make chaos`, generates 1,000
(`WUU_DIFFERENTIAL_EXAMPLES`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis_jsonschema import from_schema
from pydantic import ValidationError

from tests.spec.specdata import defs, roundtrip
from wuu.generated import validators
from wuu.generated.catalog import WORKER_METHODS

FRAMES = ["RequestFrame", "ReplyFrame", "NotificationFrame", "CallbackRequestFrame", "Frame"]
KINDS = sorted(
    {spec.params.__name__ for spec in WORKER_METHODS.values()}
    | {spec.result.__name__ for spec in WORKER_METHODS.values() if spec.result}
    | set(FRAMES)
)
EXAMPLES_PER_KIND = int(os.environ.get("WUU_DIFFERENTIAL_EXAMPLES", "100"))


def standalone(name: str) -> dict[str, Any]:
    """Def `name` as a schema of its own, with the other defs beside it for its references."""
    return {"$ref": f"#/$defs/{name}", "$defs": defs()}


def test_every_worker_method_kind_is_covered() -> None:
    assert len(KINDS) >= 25
    assert "ProcessReadResult" in KINDS and "ProcessEvent" in KINDS


@pytest.mark.parametrize("name", KINDS)
def test_jsonschema_and_models_agree(name: str) -> None:
    seen = {"accepted": 0, "rejected": 0}

    @settings(
        max_examples=EXAMPLES_PER_KIND,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(from_schema(standalone(name)))
    def check(instance: Any) -> None:
        schema_ok = not validators.errors(name, instance)
        try:
            encoded = roundtrip(name, instance)
        except ValidationError as error:
            assert not schema_ok, (
                f"the models reject what the schema accepts: {json.dumps(instance)}\n{error}"
            )
            seen["rejected"] += 1
            return
        assert schema_ok, f"the models accept what the schema rejects: {json.dumps(instance)}"
        assert encoded == instance
        seen["accepted"] += 1

    check()
    # A message whose fields are all booleans has a handful of instances; hypothesis stops once it has seen them.
    finite = all(prop.get("type") == "boolean" for prop in defs()[name].get("properties", {"": {}}).values())
    wanted = 1 if finite else EXAMPLES_PER_KIND
    assert seen["accepted"] + seen["rejected"] >= wanted
    # Generated instances follow the standard keywords; only the spec's own limit keywords may reject.
    assert seen["accepted"] >= seen["rejected"]
