"""`wuu.generated.params.parse_params`: the strict decoding of a method's params that both protocols' receivers
share, and what its failure says (what is wrong, and where), without a connection or an event loop."""

from __future__ import annotations

from typing import Any

import pytest

from wuu.generated.models import PluginClientCancelParams, ProcessReadParams
from wuu.generated.params import InvalidParams, parse_params


def test_valid_params_decode_to_their_model() -> None:
    params = parse_params(ProcessReadParams, {"Process": "p1", "MaxBytes": 4096})
    assert isinstance(params, ProcessReadParams)
    assert params.to_wire() == {"Process": "p1", "MaxBytes": 4096}


@pytest.mark.parametrize(
    ("params", "location", "field"),
    [
        ({"Process": "p1", "MaxBytes": "4096"}, "MaxBytes", "MaxBytes"),  # no coercion of a string
        ({"Process": "p1", "MaxBytes": 4096.0}, "MaxBytes", "MaxBytes"),  # no integer written with a fraction
        # Wire names only: the model misses `Process`, the schema first refuses the unknown `process`.
        ({"process": "p1", "MaxBytes": 4096}, "Process", "process"),
        ({"Process": "p1", "MaxBytes": 4096, "extra": 1}, "extra", "extra"),
        ([], "", ""),  # not an object: the params as a whole
    ],
)
def test_invalid_params_say_what_and_where(params: Any, location: str, field: str) -> None:
    with pytest.raises(InvalidParams) as caught:
        parse_params(ProcessReadParams, params)
    assert caught.value.location == location
    assert caught.value.message
    assert caught.value.field() == field


def test_the_field_is_named_as_the_spec_names_it_not_by_the_models_union_branch() -> None:
    with pytest.raises(InvalidParams) as caught:
        parse_params(PluginClientCancelParams, {"id": 1.5})
    assert caught.value.location is not None and caught.value.location.startswith("id.")
    assert caught.value.field() == "id"


def test_params_too_deep_to_encode_have_no_location() -> None:
    nested: list[Any] = []
    for _ in range(300):
        nested = [nested]
    with pytest.raises(InvalidParams) as caught:
        parse_params(ProcessReadParams, {"Process": nested, "MaxBytes": 1})
    assert caught.value.location is None
    assert "Recursion" in caught.value.message
