"""The store's refusals on the wire (`personal/wire_errors.py`): every refusal has its code, and keeps its
message; `invalid_params` names its field."""

from __future__ import annotations

import pytest

from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal.refusals import ClientInputIdTaken, Refusal, StaleRevision
from wuu.host.userhost.personal.wire_errors import CODES, refusals_as_wire_errors, wire_error


def test_every_refusal_has_a_code() -> None:
    assert set(CODES) == set(Refusal.__subclasses__())


def test_a_refusal_keeps_its_message_and_the_field_it_names() -> None:
    taken = wire_error(ClientInputIdTaken("client input in-1 already names another input of the session"))
    assert taken.to_wire() == {
        "code": -32602,
        "message": "client input in-1 already names another input of the session",
        "data": {"code": "invalid_params", "field": "user_input.client_input_id"},
    }
    stale = wire_error(StaleRevision("message 2 is at reaction revision 1, not 0"))
    assert (stale.code, stale.field) == (UserHostErrorCode.STALE_REVISION, None)


def test_the_calls_inside_raise_a_refusal_as_its_error_and_anything_else_as_it_is() -> None:
    with pytest.raises(UserHostError) as raised, refusals_as_wire_errors():
        raise StaleRevision("message 2 is at reaction revision 1, not 0")
    assert raised.value.message == "message 2 is at reaction revision 1, not 0"
    with pytest.raises(KeyError), refusals_as_wire_errors():
        raise KeyError("not a refusal")
