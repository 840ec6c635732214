"""run_code and its tool/invoke callbacks: the result views, tools called back through the host while the
request is live and never after, the actor's state, failures and the timeout (spec: worker/export.schema.json,
RunCodeParams, ResultView and ToolInvokeParams; worker/frames.schema.json, CallbackRequestFrame).

The programs are `javascript`, the language whose program model the spec states. Every case is skipped, saying
so, for an adapter that does not advertise run_code or does not run javascript (`unsupported_policy`).
The conformance host serves one tool to callbacks, `echo` (session.ECHO_TOOL).
"""

from __future__ import annotations

import json
from typing import Any

from wuu.generated import validators

from ...outcomes import CaseFailed, schema_problem
from ..session import ECHO_TOOL, Session, code_of
from ..suite import WORKER

LANGUAGE = "javascript"
STOPPED = "the program was stopped after {} ms"


async def begin(s: Session) -> None:
    """Initialize and skip unless the adapter advertises run_code and runs javascript."""
    await s.initialize()
    s.require_method("run_code")
    reply = await s.request("run_code", program("return 1;", "value"))
    if code_of(reply) == "unsupported_policy":
        s.skip(f"the adapter does not run {LANGUAGE} programs: {reply['error']}")


def program(source: str, view: str, **extra: Any) -> dict[str, Any]:
    return {"language": LANGUAGE, "source": source, "result_view": view, **extra}


async def run(s: Session, source: str, view: str, **extra: Any) -> dict[str, Any]:
    """The ToolResult of a run_code that must be answered with one."""
    return await s.ok("run_code", program(source, view, **extra))


def value_of(s: Session, text: str, what: str) -> Any:
    """The JSON value `text` encodes; fail the case when it encodes none."""
    try:
        return json.loads(text)
    except ValueError:
        raise CaseFailed(f"{what} is not JSON text: {text!r}") from None


def callbacks(s: Session, parent: str) -> tuple[list[dict[str, Any]], bool]:
    """The tool/invoke frames of `parent` received so far, and whether one came after the parent's reply."""
    found: list[dict[str, Any]] = []
    replied = late = False
    for line in s.received():
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if not isinstance(frame, dict):
            continue
        if frame.get("method") == "tool/invoke" and frame.get("parent") == parent:
            found.append(frame)
            late = late or replied
        elif frame.get("id") == parent and "method" not in frame:
            replied = True
    return found, late


async def after_a_round_trip(s: Session, parent: str) -> None:
    """Fail if a callback of `parent` arrives after its reply, up to the reply of a request sent after it."""
    await run(s, "return 0;", "value")
    _, late = callbacks(s, parent)
    s.expect(not late, f"a tool/invoke of {parent} arrived after {parent} was answered")


@WORKER.case("run_code.result-view")
async def result_view(s: Session) -> None:
    """Each program gets the view it asked for: `output` what it printed, `value` the JSON text of its
    value, `both` the output and then a line with the value; a program that returns nothing has the value null."""
    await begin(s)
    source = 'console.log("printed"); return {n: 42, list: [1, "two"]};'
    expected = {"n": 42, "list": [1, "two"]}
    output = await run(s, source, "output")
    s.expect(
        output["output"] == "printed\n" and output["is_error"] is False,
        f"the output view answered {output}; expected the output 'printed\\n'",
    )
    value = await run(s, source, "value")
    s.expect(value["is_error"] is False, f"the value view answered {value}")
    s.expect(
        value_of(s, value["output"], "the value view") == expected,
        f"the value view answered {value['output']!r}; expected the JSON text of {expected}",
    )
    both = await run(s, source, "both")
    printed, _, rest = both["output"].partition("\n")
    s.expect(
        printed == "printed" and value_of(s, rest, "the value line of the both view") == expected,
        f"the both view answered {both['output']!r}; expected 'printed', then a line with {expected}",
    )
    nothing = await run(s, "console.log('no value');", "value")
    s.expect(
        value_of(s, nothing["output"], "the value view") is None,
        f"the value view of a program that returns nothing answered {nothing['output']!r}; expected null",
    )


@WORKER.case("run_code.tool-invoke")
async def tool_invoke(s: Session) -> None:
    """A program's tool call is a tool/invoke callback of its run_code request (its `parent`), with the tool's
    name and its arguments as a JSON object text; the program gets the host's ToolResult, or the host's error."""
    await begin(s)
    source = (
        "const echoed = await tools.echo({a: 1, b: 'x'});"
        "let refused = null;"
        "try { await tools.no_such_tool({}); } catch (error) { refused = String(error.message ?? error); }"
        "return {echoed, refused};"
    )
    data = await s.ok("run_code", program(source, "value"), request_id="rc-tools")
    value = value_of(s, data["output"], "the value view")
    frames, _ = callbacks(s, "rc-tools")
    s.expect(len(frames) == 2, f"the program made 2 tool calls; {len(frames)} tool/invoke frames arrived")
    for frame in frames:
        problems = validators.errors("CallbackRequestFrame", frame)
        if problems:
            raise CaseFailed(f"a tool/invoke frame does not follow the spec: {schema_problem(problems[0])}")
    echo = frames[0]["data"]
    s.expect(
        echo["tool"] == ECHO_TOOL
        and value_of(s, echo["arguments"], "tool/invoke arguments") == {"a": 1, "b": "x"},
        f"tools.echo({{a: 1, b: 'x'}}) was sent as {echo}",
    )
    echoed = value.get("echoed") if isinstance(value, dict) else None
    s.expect(
        isinstance(echoed, dict)
        and echoed.get("is_error") is False
        and value_of(s, str(echoed.get("output")), "the echoed output") == {"a": 1, "b": "x"}
        and echoed.get("metadata") == {"parent": "rc-tools"},
        f"the program got {echoed} for tools.echo; expected the host's ToolResult",
    )
    refused = value.get("refused") if isinstance(value, dict) else None
    s.expect(
        isinstance(refused, str) and "unsupported_tool" in refused,
        f"the program's call of a tool the host refused resolved to {refused!r}; expected an error naming "
        "unsupported_tool",
    )


@WORKER.case("run_code.callbacks-while-live")
async def callbacks_while_live(s: Session) -> None:
    """Callbacks come only while their parent is in flight: none after its reply, and a cancelled program
    calls no tool once its request is answered `cancelled`."""
    await begin(s)
    await s.ok("run_code", program("await tools.echo({n: 1}); return 1;", "value"), request_id="rc-once")
    await after_a_round_trip(s, "rc-once")
    loop = "for (let n = 0; ; n++) { await tools.echo({n}); }"
    waiter = s.client.begin("run_code", program(loop, "output"), request_id="rc-loop")
    await s.until(lambda: len(callbacks(s, "rc-loop")[0]) >= 3, "the looping program's third tool call")
    cancelled = await s.ok("cancel", {"id": "rc-loop"})
    s.expect(cancelled == {"cancelled": True}, f"cancel of the looping program answered {cancelled}")
    reply = await s.wait_reply("run_code", waiter)
    s.expect(code_of(reply) == "cancelled", f"the cancelled program's request answered {reply}")
    await after_a_round_trip(s, "rc-loop")


@WORKER.case("run_code.state")
async def state(s: Session) -> None:
    """`state` is the actor's JSON object, kept from one program of the connection to the next when the
    program succeeds, and left as it was when it fails."""
    await begin(s)
    count = "state.count = (state.count ?? 0) + 1; return state.count;"
    first = await run(s, count, "value")
    second = await run(s, count, "value")
    failed = await run(s, "state.count = 100; throw new Error('not kept');", "value")
    third = await run(s, count, "value")
    values = [first["output"], second["output"], third["output"]]
    s.expect(values == ["1", "2", "3"], f"three counting programs around a failed one returned {values}")
    s.expect(failed["is_error"] is True, f"the failing program answered {failed}")


@WORKER.case("run_code.failure")
async def failure(s: Session) -> None:
    """A program that throws gets is_error and no value: its output, then a line with the error's name and
    message; a language the worker does not run gets unsupported_policy."""
    await begin(s)
    thrown = await run(s, "console.log('before'); throw new TypeError('bad input');", "both")
    lines = thrown["output"].splitlines()
    s.expect(
        thrown["is_error"] is True
        and lines[:1] == ["before"]
        and len(lines) == 2
        and "TypeError" in lines[-1]
        and "bad input" in lines[-1],
        f"a program that printed 'before' and threw TypeError('bad input') answered {thrown}",
    )
    await s.error(
        "run_code", {**program("return 1;", "value"), "language": "no-such-language"}, "unsupported_policy"
    )


@WORKER.case("run_code.timeout")
async def timeout(s: Session) -> None:
    """A program that outlives timeout_ms is stopped: is_error, what it printed, then the line
    `the program was stopped after N ms`."""
    await begin(s)
    forever = "console.log('started'); await new Promise(() => setInterval(() => {}, 1000));"
    reply = await run(s, forever, "output", timeout_ms=500)
    s.expect(
        reply["is_error"] is True and reply["output"].splitlines() == ["started", STOPPED.format(500)],
        f"a program past its 500 ms timeout answered {reply}",
    )
