"""The user-host client's envelope on the peer core: what it takes for an id in the host's frames."""

from __future__ import annotations

import pytest

from wuu.host.userhost.client import CLIENT_ENVELOPE
from wuu.worker.framing import MalformedFrame


@pytest.mark.parametrize("value", [1, 0, -(2**53 - 1), 2**53 - 1, "1", "x" * 256])
def test_a_response_names_its_request_by_a_json_rpc_id(value: object) -> None:
    assert CLIENT_ENVELOPE.frame_id(value) == value


@pytest.mark.parametrize("value", [None, True, 1.0, 2**53, "", "x" * 257, ["1"]])
def test_any_other_id_is_a_malformed_frame(value: object) -> None:
    with pytest.raises(MalformedFrame, match=r"^the id is not a JsonRpcId$"):
        CLIENT_ENVELOPE.frame_id(value)
