"""fuzz: requests generated from the spec's params schemas (seeded, reproducible), valid and broken;
and hand-written parameters that violate each method's schema.

Generated data never reaches outside the workspace: every command and process runs `true` in
`read_only`, and re-initializes keep the bound root. The seed is in every failure message;
set WUU_CONFORMANCE_SEED to replay another one.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import random
import tempfile
from collections.abc import Iterator
from typing import Any

from wuu.generated import validators
from wuu.generated.catalog import WORKER_METHODS, WORKER_TOOLS

from ...outcomes import CaseFailed, CaseSkipped
from ..session import Session, code_of
from ..suite import WORKER
from .tools import expect_code

SEED = int(os.environ.get("WUU_CONFORMANCE_SEED", "20240404"))
EXAMPLES = 15
TOOL_EXAMPLES = 6
UNKNOWN_FIELD = "zz_not_in_the_schema"
MILLISECOND_NS = 1_000_000


# --- generation ------------------------------------------------------------------------------------------


def _referenced_defs(name: str) -> dict[str, Any]:
    """The bundle's defs that `name` needs (itself and every def it references), by name."""
    defs = validators.bundle()["$defs"]
    found: dict[str, Any] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current in found:
            continue
        found[current] = defs[current]
        stack: list[Any] = [defs[current]]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith("#/$defs/"):
                    pending.append(ref.removeprefix("#/$defs/"))
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return found


@contextlib.contextmanager
def _spec_constants_only() -> Iterator[None]:
    """Keep Hypothesis from mixing in the literals of the "local" modules it finds loaded.

    Those depend on how the suite is installed (editable or not) and on what else the process has
    imported, so with them a seed would not mean the same requests everywhere. This reaches into
    Hypothesis internals; where they differ, generation goes on unpinned.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if original is None or cache is None or not hasattr(providers, "Constants"):
        yield
        return
    cache.clear()
    providers._get_local_constants = providers.Constants
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.clear()


@contextlib.contextmanager
def _private_storage() -> Iterator[None]:
    """Hypothesis caches Unicode tables under ./.hypothesis; keep them out of the user's directory."""
    from hypothesis import configuration

    saved = getattr(configuration, "__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="wuu-conformance-hypothesis-") as directory:
        configuration.set_hypothesis_home_dir(directory)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(saved)


@functools.cache
def _generated(name: str, count: int, seed: int) -> tuple[str, ...]:
    """Up to `count` instances of the spec def `name`, the same for the same seed (JSON texts)."""
    schema: dict[str, Any] = {"$ref": f"#/$defs/{name}", "$defs": _referenced_defs(name)}
    found: list[str] = []
    with _private_storage(), _spec_constants_only():
        # Imported here: hypothesis_jsonschema touches Hypothesis's storage when imported.
        import hypothesis
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis_jsonschema import from_schema

        @hypothesis.seed(seed)
        @settings(
            max_examples=count,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(from_schema(schema))
        def collect(value: Any) -> None:
            found.append(json.dumps(value))

        collect()
    # The x- limit keywords (e.g. ids of at most 256 UTF-8 bytes) are unknown to the generator.
    return tuple(text for text in found if not validators.errors(name, json.loads(text)))


def instances(name: str, count: int = EXAMPLES) -> list[Any]:
    """Fresh copies of the generated instances of def `name`."""
    return [json.loads(text) for text in _generated(name, count, SEED)]


def fuzzed_methods(s: Session) -> list[str]:
    """The advertised methods that the catalog gives a params schema, in catalog order."""
    return [
        method
        for method, spec in WORKER_METHODS.items()
        if spec.direction == "host_to_worker" and spec.kind == "request" and method in s.methods
    ]


class Pools:
    """Real process ids and export tokens, so that generated requests sometimes name live things."""

    def __init__(self) -> None:
        self.processes: list[str] = []
        self.tokens: list[str] = []
        self.file: str | None = None

    @classmethod
    async def make(cls, s: Session) -> Pools:
        pools = cls()
        if "process/start" in s.methods:
            try:
                mode = await s.command_mode()
            except CaseSkipped:
                mode = None
            if mode is not None:
                for argv in (["true"], ["sleep", "0.2"]):
                    record = await s.ok("process/start", {"argv": argv, "permission_mode": mode})
                    pools.processes.append(record["id"])
        reply = await s.execute("write_file", path="fuzz.txt", content="fuzz\nfuzz fuzz\n")
        if "data" in reply and not reply["data"]["is_error"]:
            pools.file = "fuzz.txt"
            if "export/open" in s.methods:
                for _ in range(2):
                    pools.tokens.append((await s.ok("export/open", {"path": pools.file}))["token"])
        return pools


def safe_tool_arguments(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments that cannot run anything but `true`."""
    if WORKER_TOOLS[tool].runs_commands:
        arguments["argv"] = ["true"]
    return arguments


def execute_requests(count: int = EXAMPLES) -> list[dict[str, Any]]:
    """Generated execute data: random tools and arguments, and each core tool with generated arguments."""
    found = []
    for data in instances("ExecutionToolRequestV4", count):
        if data["tool"] in WORKER_TOOLS:
            data["tool"] = "zz_" + data["tool"]
        found.append(data)
    for index, tool in enumerate(sorted(WORKER_TOOLS)):
        for number, arguments in enumerate(instances(WORKER_TOOLS[tool].arguments.__name__, TOOL_EXAMPLES)):
            data = copy.deepcopy(found[(index + number) % len(found)])
            data["tool"] = tool
            data["call"]["arguments"] = json.dumps(safe_tool_arguments(tool, arguments))
            found.append(data)
    return found


def make_safe(s: Session, method: str, data: dict[str, Any], index: int, pools: Pools) -> dict[str, Any]:
    """Force what could reach outside the workspace or run long; point some ids at live things."""
    if "permission_mode" in data:
        data["permission_mode"] = "read_only"
    if method == "initialize":
        data["root"] = str(s.root)
    elif method == "execute":
        if data["tool"] in WORKER_TOOLS:
            arguments = json.loads(data["call"]["arguments"])
            if index % 2 == 0 and pools.file is not None and "path" in arguments:
                arguments["path"] = "." if data["tool"] == "list_dir" else pools.file
            data["call"]["arguments"] = json.dumps(safe_tool_arguments(data["tool"], arguments))
    elif method == "process/start":
        data["argv"] = ["true"]
    elif method == "process/read":
        for key in ("Wait", "MinDwell"):
            if key in data:
                data[key] = min(data[key], 50 * MILLISECOND_NS)
    elif method == "process/stop" and "grace_ms" in data:
        data["grace_ms"] = min(data["grace_ms"], 1000)
    elif method == "run_code":
        data["timeout_ms"] = min(data.get("timeout_ms", 2000), 2000)
    key = {"process/read": "Process"}.get(method, "id")
    live = method in ("process/get", "process/read", "process/stop", "process/write")
    if live and pools.processes and index % 2 == 0:
        data[key] = pools.processes[index // 2 % len(pools.processes)]
    if method in ("export/read", "export/close") and pools.tokens and index % 2 == 0:
        data["token"] = pools.tokens[index // 2 % len(pools.tokens)]
    return data


def requests_for(s: Session, method: str, pools: Pools) -> list[dict[str, Any]]:
    """The safe generated data of one method's requests."""
    generated = (
        execute_requests() if method == "execute" else instances(WORKER_METHODS[method].params.__name__)
    )
    return [make_safe(s, method, data, index, pools) for index, data in enumerate(generated)]


def check_metadata(s: Session, data: dict[str, Any], reply: dict[str, Any]) -> None:
    """The metadata of a core tool's successful result follows the schema the catalog names for it."""
    result = reply.get("data") or {}
    if result.get("is_error") is False and "metadata" in result:
        name = WORKER_TOOLS[data["tool"]].metadata.__name__
        problems = validators.errors(name, result["metadata"])
        s.expect(
            not problems,
            f"seed {SEED}: the metadata of {data['tool']} does not follow {name} "
            f"({problems[0].message if problems else ''}): {_short(reply)} for {_short(data)}",
        )


def _short(data: Any) -> str:
    text = json.dumps(data)
    return text if len(text) < 400 else text[:400] + " ..."


async def send(s: Session, method: str, data: dict[str, Any]) -> dict[str, Any]:
    """The checked reply to one generated request; a failure names the seed and the request."""
    try:
        return await s.request(method, data)
    except CaseFailed as failure:
        raise CaseFailed(f"seed {SEED}: {method} {_short(data)}: {failure}") from None


async def still_serving(s: Session, first: dict[str, Any], **binding: Any) -> None:
    """The adapter answers an equal initialize with its first reply, and process/list."""
    again = await s.ok("initialize", s.binding(**binding))
    s.expect(again == first, f"seed {SEED}: after the fuzzing, initialize answered {again}, not {first}")
    await s.ok("process/list", {})


# --- breaking one thing ------------------------------------------------------------------------------


def _resolve(schema: Any) -> Any:
    defs = validators.bundle()["$defs"]
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        schema = defs[schema["$ref"].removeprefix("#/$defs/")]
    return schema


def _objects(value: Any, schema: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, schema) of a closed object (additionalProperties false) inside `value`."""
    schema = _resolve(schema)
    if isinstance(value, dict) and isinstance(schema, dict):
        if schema.get("additionalProperties") is False:
            yield path, schema
        for key, item in value.items():
            child = schema.get("properties", {}).get(key, schema.get("additionalProperties"))
            yield from _objects(item, child, (*path, key))
    elif isinstance(value, list) and isinstance(schema, dict):
        for number, item in enumerate(value):
            yield from _objects(item, schema.get("items"), (*path, number))


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from _leaves(item, (*path, number))
    else:
        yield path, value


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def breakages(name: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every way to break exactly one thing of a valid instance: drop a required field, add an unknown
    field, put "1" where an integer is or 1 where a string is. Only those the schema refuses."""
    found: list[tuple[str, dict[str, Any]]] = []

    def variant(what: str, path: tuple[Any, ...], change: Any) -> None:
        broken = copy.deepcopy(data)
        change(_at(broken, path[:-1]) if path else broken, path[-1] if path else None)
        if validators.errors(name, broken):
            found.append((what, broken))

    for path, schema in _objects(data, {"$ref": f"#/$defs/{name}"}):
        where = ".".join(map(str, path)) or "data"
        for field in schema.get("required", []):
            variant(f"{where}.{field} dropped", (*path, field), lambda parent, key: parent.pop(key))
        variant(
            f"{where}.{UNKNOWN_FIELD} added",
            (*path, UNKNOWN_FIELD),
            lambda parent, key: parent.__setitem__(key, 1),
        )
    for path, leaf in _leaves(data):
        where = ".".join(map(str, path))
        if isinstance(leaf, int) and not isinstance(leaf, bool):
            variant(f'{where} = "1" (a string for an integer)', path, lambda p, k: p.__setitem__(k, "1"))
        elif isinstance(leaf, str):
            variant(f"{where} = 1 (an integer for a string)", path, lambda p, k: p.__setitem__(k, 1))
    return found


async def _tools_served(s: Session) -> list[str]:
    """The path tools whose arguments can be broken without other refusals in the way."""
    served = []
    for tool, arguments in (("read_file", {"path": "fuzz-missing.txt"}), ("list_dir", {"path": "."})):
        if code_of(await s.execute(tool, "read_only", **arguments)) != "unsupported_tool":
            served.append(tool)
    return served


async def expect_invalid(
    s: Session, method: str, broken: dict[str, Any], twin: dict[str, Any], what: str
) -> None:
    """`broken` gets invalid_request, or the code its unbroken `twin` gets (sent after it: a broken request
    has no effect), which names the other rule that both break."""
    reply = await send(s, method, broken)
    other = code_of(await send(s, method, twin))
    codes = {"invalid_request"} | ({other} if other else set())
    expect_code(s, reply, codes, f"seed {SEED}: {what} ({_short(broken)})")


# --- the cases ------------------------------------------------------------------------------------------


@WORKER.case("fuzz.valid-requests", "errors.replies-follow-schema")
async def valid_requests(s: Session) -> None:
    """Requests generated from each advertised method's params schema (and each core tool's arguments)
    get a result that follows the result schema or an error with a code of the spec; the adapter then
    still answers initialize the same and process/list."""
    capabilities = ["process.start.v1"]
    first = await s.initialize(capabilities=capabilities)
    pools = await Pools.make(s)
    for method in fuzzed_methods(s):
        for data in requests_for(s, method, pools):
            reply = await send(s, method, data)
            if method == "execute" and data["tool"] in WORKER_TOOLS:
                check_metadata(s, data, reply)
    s.events()
    await still_serving(s, first, capabilities=capabilities)


@WORKER.case("fuzz.invalid-requests")
async def invalid_requests(s: Session) -> None:
    """Generated requests broken in exactly one field (a required one dropped, an unknown one added, a
    string for an integer, an integer for a string) get invalid_request, and the adapter keeps serving;
    so do the arguments of read_file and list_dir broken the same way. A generated request may break
    another rule as well (name an unknown process or tool): its unbroken twin, sent next, tells which, and
    that rule's code is the spec's too."""
    first = await s.initialize()
    pools = await Pools.make(s)
    chooser = random.Random(SEED)
    batches: list[tuple[str, str, list[dict[str, Any]]]] = [
        (method, WORKER_METHODS[method].params.__name__, requests_for(s, method, pools))
        for method in fuzzed_methods(s)
    ]
    for method, name, requests in batches:
        for data in requests:
            options = breakages(name, data)
            if not options:
                continue
            what, broken = chooser.choice(options)
            await expect_invalid(s, method, broken, data, f"{method} with {what}")
    for tool in await _tools_served(s):
        name = WORKER_TOOLS[tool].arguments.__name__
        for arguments in instances(name):
            options = breakages(name, arguments)
            if not options:
                continue
            what, broken = chooser.choice(options)
            twin = s.tool(tool, arguments, "read_only")
            await expect_invalid(
                s, "execute", s.tool(tool, broken, "read_only"), twin, f"{tool} with arguments {what}"
            )
    await still_serving(s, first)


@WORKER.case("methods.invalid-params")
async def invalid_params(s: Session) -> None:
    """Parameters of each advertised method with a wrong type, a missing or unknown field, or a value
    out of range (including ids over 256 UTF-8 bytes) get invalid_request."""
    await s.initialize()
    # The parameters name live things, so that they break no rule but the schema's. Where the adapter has
    # none to offer (no process, no export), the method's base request tells which other rule the names
    # break, and its code is the spec's too.
    pools = await Pools.make(s)
    process = pools.processes[0] if pools.processes else "p"
    token = pools.tokens[0] if pools.tokens else "t"
    read = s.tool("read_file", {"path": pools.file or "a"})
    long_id = "€" * 86
    wrong: dict[str, list[dict[str, Any]]] = {
        "cancel": [{}, {"id": 5}, {"id": ""}, {"id": long_id}, {"id": "x", "extra": True}],
        "execute": [
            {**read, "permission_mode": "root"},
            {**read, "actor": {"kind": "robot", "id": "r"}},
            {**read, "call": {"id": "c", "arguments": {"path": "a"}}},
            {key: value for key, value in read.items() if key != "call"},
        ],
        "process/start": [
            {"argv": [], "permission_mode": "read_only"},
            {"argv": "true", "permission_mode": "read_only"},
            {"argv": ["true"], "permission_mode": "admin"},
            {"argv": ["true"]},
            {"argv": ["true"], "permission_mode": "read_only", "timeout_ms": 0},
            {"argv": ["true"], "permission_mode": "read_only", "env": {"1BAD": "x"}},
            {"argv": ["true"], "permission_mode": "read_only", "env": {"A": 1}},
            {"argv": ["true"], "permission_mode": "read_only", "stdin": "yes"},
            # No NUL byte in an argument, the working directory or an environment value.
            {"argv": ["tr\0ue"], "permission_mode": "read_only"},
            {"argv": ["true"], "permission_mode": "read_only", "cwd": "a\0b"},
            {"argv": ["true"], "permission_mode": "read_only", "env": {"A": "x\0y"}},
        ],
        "process/list": [{"all": True}],
        "process/get": [{}, {"id": 5}, {"id": ""}],
        "process/read": [
            {"Process": process, "MaxBytes": 0},
            {"Process": process, "MaxBytes": 8388609},
            {"Process": process, "OffsetBytes": -1},
            {"Process": process, "OffsetBytes": 2**63},
            {"Process": process, "Wait": 1.5},
            {"Process": process, "max_bytes": 5},
        ],
        "process/stop": [
            {"id": process, "signal": "HUP"},
            {"id": process, "grace_ms": -1},
            {"id": process, "grace_ms": 2**31},
        ],
        "process/write": [{"id": process}, {"id": process, "data": "", "close": "yes"}],
        "export/open": [{"path": ""}, {}],
        "export/read": [
            {"token": token, "offset": -1},
            {"token": token, "offset": 0, "max_bytes": 0},
            {"token": token, "offset": 0, "max_bytes": 8388609},
        ],
        "export/close": [{}, {"token": 1}],
        "run_code": [{"language": "python", "source": "1", "result_view": "all"}],
    }
    # The valid request each broken one is made from, where it names something or runs a command.
    bases: dict[str, dict[str, Any]] = {
        "execute": read,
        "process/start": {"argv": ["true"], "permission_mode": "read_only"},
        "process/read": {"Process": process},
        "process/stop": {"id": process, "grace_ms": 1000},
        "process/write": {"id": process, "data": ""},
        "export/read": {"token": token, "offset": 0},
    }
    checked = 0
    for method, cases in wrong.items():
        if method not in s.methods:
            continue
        replies = [(data, await s.request(method, data)) for data in cases]
        # Sent after the broken ones, which must have had no effect (the base may end a process).
        base = bases.get(method)
        other = code_of(await s.request(method, base)) if base else None
        codes = {"invalid_request"} | ({other} if other else set())
        for data, reply in replies:
            expect_code(s, reply, codes, f"{method} {_short(data)}")
            checked += 1
    s.expect(checked > 0, "no method to check")
    await s.ok("process/list", {})
