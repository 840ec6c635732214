"""The fuzz campaign's oracle reads frames the way spec/schema/worker/frames.schema.json says."""

from __future__ import annotations

import pytest

from tools.chaos.oracle import Expect, judge
from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

REQUEST = b'{"id":"1","method":"process/list","token":"t","data":{}}'


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (REQUEST, Expect.ANSWER),
        (b'{"id":"1","method":"nope","token":"t","data":[]}', Expect.ANSWER),  # well-formed, wrong fields
        (b'{"id":"' + b"\xc3\xa9" * 128 + b'","method":"m"}', Expect.ANSWER),  # an id of 256 bytes
        (b'{"id":"' + b"\xc3\xa9" * 129 + b'","method":"m"}', Expect.ENDS),  # 258 bytes
        (b'{"id":"cb-1","data":{}}', Expect.IGNORED),  # a reply to nothing in flight
        (b'{"id":"1","token":"t","data":{}}', Expect.ENDS),  # a request without a method
        (b'{"id":"1","parent":"p","data":{}}', Expect.ENDS),
        (b'{"method":"process/event","data":{}}', Expect.ENDS),  # a host sends no notifications
        (b'{"id":1,"method":"m","token":"t","data":{}}', Expect.ENDS),
        (b'{"id":"1","method":7,"token":"t","data":{}}', Expect.ENDS),
        (b"[1]", Expect.ENDS),
        (b'{"id":"1","method":"m\xff","token":"t"}', Expect.ENDS),  # not UTF-8
        (b'{"id":"1","method":"m","token":"t","data":{"x":NaN}}', Expect.ENDS),  # not JSON
        (b'{"id":"1","method":"m","token":"t","data":{"x":1e400}}', Expect.EITHER),  # past a double
        (b'{"id":"1","method":"m","token":"t","data":{"x":' + b"[" * 3000 + b"]" * 3000 + b"}}", Expect.ENDS),
    ],
)
def test_the_oracle_reads_a_frame_as_the_spec_does(line: bytes, expect: Expect) -> None:
    assert judge(line + b"\n").expect is expect


def test_a_frame_at_the_limit_is_answered_and_one_byte_more_ends_the_connection() -> None:
    head, tail = b'{"id":"1","method":"process/list","token":"t","data":{"p":"', b'"}}\n'
    at_limit = head + b"p" * (WORKER_MAX_FRAME_BYTES - len(head) - len(tail)) + tail
    assert len(at_limit) == WORKER_MAX_FRAME_BYTES
    assert judge(at_limit).expect is Expect.ANSWER
    over = at_limit[:-3] + b'p"}}\n'
    assert judge(over).expect is Expect.ENDS
