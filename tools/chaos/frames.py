"""Seeded host-to-worker frames for the fuzz campaign: valid requests from the spec's examples, mutations
of them, and random bytes.

The valid requests are the `valid` examples of every host-to-worker method's params (and of every tool's
arguments, inside `execute`) under spec/examples/worker/, rebound to the run's workspace: absolute paths
become relative, commands become harmless ones, and `unconfined` becomes `standard`, so no fuzzed request
reaches outside the workspace or runs anything that outlives a moment.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

SPEC = Path(__file__).resolve().parents[2] / "spec"
TOKEN = "chaos-token"
SAFE_ARGV = (["true"], ["echo", "fuzz"], ["sh", "-c", "echo out; echo err >&2"], ["cat"])
ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    -0.0,
    "",
    "x" * 300,
    "é\u2028\u0000",
    [],
    {},
    [1, "a", None],
    {"k": {"k": []}},
)
HUGE_NUMBERS: tuple[int | float, ...] = (
    2**31,
    2**31 - 1,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
    1e308,
    -1e308,
    5e-324,
)
INVALID_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80")


def _examples(name: str) -> list[Any]:
    path = SPEC / "examples" / "worker" / f"{name}.json"
    return [example["instance"] for example in json.loads(path.read_text())["valid"]]


def _sanitize(value: Any) -> Any:
    """Keep a request inside the workspace and harmless (see the module's docstring)."""
    if isinstance(value, dict):
        out = {key: _sanitize(item) for key, item in value.items()}
        if out.get("permission_mode") == "unconfined":
            out["permission_mode"] = "standard"
        if "argv" in out:
            out["argv"] = list(SAFE_ARGV[len(str(out["argv"])) % len(SAFE_ARGV)])
        if isinstance(out.get("path"), str):
            out["path"] = out["path"].lstrip("/") or "."
        return out
    if isinstance(value, list):
        return [_sanitize(item) for item in value]
    return value


def valid_requests() -> list[tuple[str, dict[str, Any]]]:
    """Every (method, data) the spec's examples give, sanitized; `initialize` aside (the harness sends it)."""
    catalog = json.loads((SPEC / "methods" / "worker.json").read_text())
    requests: list[tuple[str, dict[str, Any]]] = []
    for method in catalog["methods"]:
        if method["direction"] != "host_to_worker" or method["method"] == "initialize":
            continue
        requests += [(method["method"], _sanitize(data)) for data in _examples(method["params"])]
    for tool in catalog["tools"]:
        for arguments in _examples(tool["arguments"]):
            call = {"id": "call-1", "arguments": json.dumps(_sanitize(arguments))}
            data = {"tool": tool["tool"], "call": call, "actor": {"kind": "agent", "id": "a"}}
            requests.append(("execute", {**data, "permission_mode": "standard"}))
    return requests


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The paths (keys and indexes) of every value inside `value`, `value` itself first."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value[path[0]] = _replace(value[path[0]], path[1:], new)
    return value


def _nested(depth: int) -> Any:
    value: Any = {}
    for index in range(depth):
        value = [value] if index % 2 else {"n": value}
    return value


class FrameMaker:
    """Makes the frames of one fuzz run from one seeded random generator; `next()` gives one frame's bytes.

    Most frames are well-formed (each gets one reply); about one in `ending_every` is of a kind that
    usually ends the connection (flipped bytes, a truncation, invalid UTF-8, an oversize line, random
    bytes, a bad id, ...). The oracle, not the maker, decides what each frame's bytes mean.
    """

    def __init__(self, rng: random.Random, *, ending_every: int = 1000) -> None:
        self.rng = rng
        self.ending_every = ending_every
        self._requests = valid_requests()
        self._ids = itertools.count(1)
        self._well_formed: list[Callable[[], list[bytes]]] = [
            self._valid,
            self._valid,
            self._valid,
            self._wrong_type,
            self._wrong_type,
            self._huge_number,
            self._drop_field,
            self._extra_field,
            self._tool_arguments,
            self._deep_data,
            self._odd_envelope,
            self._duplicate_id,
            self._cancel_in_flight,
            self._stray_reply,
        ]
        self._ending: list[tuple[Callable[[], list[bytes]], int]] = [
            (self._flip_bytes, 6),
            (self._truncate, 4),
            (self._invalid_utf8, 4),
            (self._random_bytes, 3),
            (self._non_object, 2),
            (self._bad_id, 3),
            (self._envelope_without_method, 2),
            (self._too_deep, 1),
            (self._past_parser_limits, 2),
            (self._oversize, 1),
        ]

    def next(self) -> list[bytes]:
        """The next frame (or two, for a duplicate id), as lines ready to write."""
        if self.rng.randrange(self.ending_every) == 0:
            makers = [maker for maker, _ in self._ending]
            weights = [weight for _, weight in self._ending]
            made: list[bytes] = self.rng.choices(makers, weights)[0]()
            return made
        return self.rng.choice(self._well_formed)()

    # --- well-formed -------------------------------------------------------------------------------------

    def _request(self) -> dict[str, Any]:
        method, data = self.rng.choice(self._requests)
        return {"id": f"f{next(self._ids)}", "method": method, "token": TOKEN, "data": copy.deepcopy(data)}

    def _valid(self) -> list[bytes]:
        return [_line(self._request())]

    def _mutate_data(self, new: Callable[[], Any]) -> list[bytes]:
        frame = self._request()
        path = self.rng.choice(list(_paths(frame["data"])))
        frame["data"] = _sanitize(_replace(frame["data"], path, new()))
        return [_line(frame)]

    def _wrong_type(self) -> list[bytes]:
        return self._mutate_data(lambda: copy.deepcopy(self.rng.choice(ODD_VALUES)))

    def _huge_number(self) -> list[bytes]:
        return self._mutate_data(lambda: self.rng.choice(HUGE_NUMBERS))

    def _deep_data(self) -> list[bytes]:
        return self._mutate_data(lambda: _nested(self.rng.randrange(2, 400)))

    def _drop_field(self) -> list[bytes]:
        frame = self._request()
        if frame["data"]:
            del frame["data"][self.rng.choice(sorted(frame["data"]))]
        return [_line(frame)]

    def _extra_field(self) -> list[bytes]:
        frame = self._request()
        target = frame if self.rng.random() < 0.3 else frame["data"]
        target[self.rng.choice(["x", "Extra", "id", "token", "__proto__"])] = self.rng.choice(ODD_VALUES)
        if target is frame and not isinstance(frame.get("id"), str):
            frame["id"] = f"f{next(self._ids)}"
        return [_line(frame)]

    def _tool_arguments(self) -> list[bytes]:
        frame = self._request()
        if frame["method"] != "execute":
            return [_line(frame)]
        arguments = json.loads(frame["data"]["call"]["arguments"])
        if self.rng.random() < 0.2:
            text = json.dumps(arguments)
            cut = self.rng.randrange(len(text) + 1)
            frame["data"]["call"]["arguments"] = text[:cut]
        else:
            path = self.rng.choice(list(_paths(arguments)))
            new = self.rng.choice((*ODD_VALUES, *HUGE_NUMBERS[:8], "../outside", "/etc/passwd"))
            frame["data"]["call"]["arguments"] = json.dumps(_sanitize(_replace(arguments, path, new)))
        return [_line(frame)]

    def _odd_envelope(self) -> list[bytes]:
        frame = self._request()
        choice = self.rng.randrange(5)
        if choice == 0:
            frame["token"] = self.rng.choice(["", "other", TOKEN + "x"])
        elif choice == 1:
            frame["method"] = self.rng.choice(["", "nope", "process/event", "tool/invoke", "initialize "])
        elif choice == 2:
            frame["token"] = self.rng.choice(ODD_VALUES)
        elif choice == 3:
            frame["data"] = self.rng.choice(ODD_VALUES)
        else:
            frame["id"] = self.rng.choice(["é" * 128, "r" * 256, " ", "\u2028"])
        return [_line(frame)]

    def _duplicate_id(self) -> list[bytes]:
        first = self._request()
        second = self._request()
        second["id"] = first["id"]
        return [_line(first), _line(second)]

    def _cancel_in_flight(self) -> list[bytes]:
        frame = self._request()
        cancel = {
            "id": f"f{next(self._ids)}",
            "method": "cancel",
            "token": TOKEN,
            "data": {"id": frame["id"]},
        }
        return [_line(frame), _line(cancel)]

    def _stray_reply(self) -> list[bytes]:
        reply: dict[str, Any] = {"id": f"cb-{self.rng.randrange(1, 50)}"}
        reply[self.rng.choice(["data", "error"])] = self.rng.choice(ODD_VALUES)
        return [_line(reply)]

    # --- usually connection-ending -----------------------------------------------------------------------

    def _flip_bytes(self) -> list[bytes]:
        data = bytearray(_line(self._request())[:-1])
        for _ in range(self.rng.randrange(1, 4)):
            position = self.rng.randrange(len(data))
            data[position] ^= 1 << self.rng.randrange(8)
        return [_clean(bytes(data))]

    def _truncate(self) -> list[bytes]:
        data = _line(self._request())[:-1]
        return [data[: self.rng.randrange(len(data))] + b"\n"]

    def _invalid_utf8(self) -> list[bytes]:
        data = _line(self._request())[:-1]
        quote = [index for index, byte in enumerate(data) if byte == ord('"')]
        position = self.rng.choice(quote) + 1
        return [data[:position] + self.rng.choice(INVALID_UTF8) + data[position:] + b"\n"]

    def _random_bytes(self) -> list[bytes]:
        return [_clean(self.rng.randbytes(self.rng.randrange(0, 200)))]

    def _non_object(self) -> list[bytes]:
        value = self.rng.choice([[self._request()], "frame", 4, None, True, []])
        return [_line(value)]

    def _bad_id(self) -> list[bytes]:
        frame = self._request()
        frame["id"] = self.rng.choice(["", 7, None, ["f1"], {"id": "f1"}, "r" * 257, "é" * 129, 1.5])
        if self.rng.random() < 0.3:
            del frame["id"]
        return [_line(frame)]

    def _envelope_without_method(self) -> list[bytes]:
        frame = self._request()
        del frame["method"]
        if self.rng.random() < 0.5:
            frame["parent"] = "f1"
        return [_line(frame)]

    def _too_deep(self) -> list[bytes]:
        frame = self._request()
        frame["data"] = {"deep": _nested(self.rng.randrange(1100, 3000))}
        return [_deep_line(frame)]

    def _past_parser_limits(self) -> list[bytes]:
        frame = self._request()
        frame["data"]["x"] = "@"
        odd = self.rng.choice([b"1e400", str(10**400).encode(), b'"\\ud800"', b"-1e999"])
        return [_line(frame).replace(b'"@"', odd)]

    def _oversize(self) -> list[bytes]:
        frame = self._request()
        pad = WORKER_MAX_FRAME_BYTES - len(_line(frame)) + self.rng.randrange(0, 3)
        frame["data"]["pad"] = "p" * max(0, pad - len(',"pad":""'))
        return [_line(frame)]


def _line(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _deep_line(value: Any) -> bytes:
    """`_line` for values past Python's recursion limit (nested dicts and lists only)."""
    parts: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict):
            stack.append("}")
            for index, (key, child) in enumerate(reversed(list(item.items()))):
                stack.append(child)
                stack.append(json.dumps(key) + ":")
                if index < len(item) - 1:
                    stack.append(",")
            stack.append("{")
        elif isinstance(item, list):
            stack.append("]")
            for index, child in enumerate(reversed(item)):
                stack.append(child)
                if index < len(item) - 1:
                    stack.append(",")
            stack.append("[")
        else:
            parts.append(json.dumps(item))
    return "".join(parts).encode() + b"\n"


def _clean(data: bytes) -> bytes:
    """One line: `data` without newlines of its own, then the newline."""
    return data.replace(b"\n", b" ") + b"\n"
