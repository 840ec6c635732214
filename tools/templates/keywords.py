"""The spec's own schema keywords, which JSON Schema cannot express, and the check of each limit.

The one list of these keywords: the generator, the spec linter, the wire models and the jsonschema
validators all read it from here. It imports nothing but the standard library, so that both the
models (`wire`) and the validators can depend on it without depending on each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_UTF8_BYTES = "x-max-utf8-bytes"
MAX_DECODED_BYTES = "x-max-decoded-bytes"
MAX_SUM = "x-max-sum"
SPEC_KEYWORDS = (MAX_UTF8_BYTES, MAX_DECODED_BYTES, MAX_SUM)
"""The limits that spec/ itself writes (spec/README.md, "Limits"); models and validators both check them."""

UNIQUE_ITEMS = "x-unique-items"
NOT_NULL = "x-not-null"
GENERATOR_KEYWORDS = (UNIQUE_ITEMS, NOT_NULL)
"""What the generator adds for the models alone: `uniqueItems`, which the model generator leaves
unchecked, renamed; and an optional field that is never null. spec/ never writes them."""

MODEL_KEYWORDS = SPEC_KEYWORDS + GENERATOR_KEYWORDS
"""Every keyword the wire models carry as field extras and enforce."""

JSONRPC_NUMBER = "x-jsonrpc-number"
"""The JSON-RPC error number of each value of an error-code enum (`JsonRpcError.code`): an object from every
enum value to its number, -32768 to -32000."""
HTTP_STATUS = "x-http-status"
"""The HTTP status of each value of an error-code enum on the HTTP binding (userhost/http.schema.json): an
object from every enum value to its status, 400 to 599. The OpenAPI generator reads it too."""
GRPC_STATUS = "x-grpc-status"
"""The gRPC status code of a call that fails with each value of an error-code enum: an object from every enum
value to the name of a gRPC status code other than OK (`INVALID_ARGUMENT`)."""
CODE_TABLES = (JSONRPC_NUMBER, HTTP_STATUS, GRPC_STATUS)
"""The tables that stand on an error-code enum beside its values (spec/README.md, "Error codes"). They describe
how a code travels, not a value, so models and validators leave them alone; the generator makes a typed table
of each in `catalog`."""


def limit_violation(keyword: str, argument: Any, value: Any) -> str | None:
    """Check `value` against one of SPEC_KEYWORDS with its schema `argument`; return what is wrong, or None.

    `value` is JSON (for the validators) or a model's field value (for the models): an `x-max-sum`
    array may hold mappings or objects with the summed property as an attribute.
    """
    if keyword == MAX_UTF8_BYTES:
        if isinstance(value, str):
            size = len(value.encode("utf-8"))
            if size > argument:
                return f"{size} UTF-8 bytes is over the limit of {argument}"
        return None
    if keyword == MAX_DECODED_BYTES:
        if isinstance(value, str):
            import base64  # here: an adapter's start-up reads no base64 (a worker loads it when it does)
            import binascii

            try:
                size = len(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                return "is not valid base64"
            if size > argument:
                return f"{size} decoded bytes is over the limit of {argument}"
        return None
    if keyword == MAX_SUM:
        if isinstance(value, list):
            prop = argument["property"]
            total = 0
            for item in value:
                item_value = item.get(prop) if isinstance(item, Mapping) else getattr(item, prop, None)
                if isinstance(item_value, int):
                    total += item_value
            if total > argument["maximum"]:
                return f"the sum of `{prop}` is {total}, over the limit of {argument['maximum']}"
        return None
    raise ValueError(f"unknown limit keyword {keyword}")


# The spec's patterns are ECMAScript's (JSON Schema's dialect); Python's `re` reads two tokens otherwise:
# its `$` also matches before a final newline, and its `.` matches CR, U+2028 and U+2029.
_ECMA_DOT = "[^\\n\\r\\u2028\\u2029]"


def python_pattern(pattern: str) -> str:
    """The spec's (ECMAScript) `pattern` as a Python regular expression that matches the same strings:
    an unescaped `$` outside a character class is the end of the text (`\\Z`), and `.` excludes every
    line terminator."""
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append(char)
        elif char == "[":
            in_class = True
            out.append(char)
        elif char == "$":
            out.append("\\Z")
        elif char == ".":
            out.append(_ECMA_DOT)
        else:
            out.append(char)
        index += 1
    return "".join(out)
