"""`wuu exec`: one non-interactive run of the built-in Wuu engine in a chosen permission mode
(spec/schema/permissions/exec_run.schema.json, ExecRun, which also states the exit statuses).

    wuu exec --permission-mode read_only "Explain the repository without changing files"
    wuu exec --permission-mode standard --json "/write notes.txt
    hello"

The prompt goes to the configured model (the deterministic stand-in by default) with the worker's execute tools.
Each call it asks for runs in a native worker bound to the project directory in the flag's mode: the worker's
own checks allow or refuse it, nobody is asked, and a refusal is what the model is told. The mode comes from
the flag alone; no file of the project is read.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from pathlib import Path
from typing import Any

from wuu.generated.catalog import WORKER_TOOLS
from wuu.generated.models import (
    ErrorCode,
    ExecCall,
    ExecCallOutcome,
    ExecRun,
    ExecRunStatus,
    PermissionMode,
)
from wuu.generated.validators import bundle
from wuu.worker.client import ConnectionLost, WorkerClient
from wuu.worker.errors import split_error

from .configuration import ConfigurationError, home_of, load_configuration
from .personal.model import (
    ChatMessage,
    ModelAdapter,
    ModelConfig,
    ModelConfigError,
    ModelUnavailable,
    ToolSpec,
)
from .personal.model_agent import inline_refs

MAX_ROUNDS = 32
"""The most rounds of tool calls of one run: a model that keeps calling is stopped (`status: failed`)."""
MODEL_CALL_SECONDS = 120.0
REFUSALS = frozenset(
    {
        ErrorCode.PERMISSION_DENIED,
        ErrorCode.PATH_OUTSIDE_ROOT,
        ErrorCode.SENSITIVE_PATH,
        ErrorCode.SANDBOX_UNAVAILABLE,
    }
)
"""The error codes of the permission checks: a call answered with one is `refused`."""
ACTOR = {"kind": "agent", "id": "wuu-exec"}
SESSION = "wuu-exec"
GUIDANCE = (
    "You work on the project in the current directory through the tools, in the {mode} permission mode. "
    "A call the permission checks refuse is not retried by asking anyone: say what you could not do."
)
EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3


class UsageError(Exception):
    """A flag or the configuration cannot be used: nothing runs (exit status 2)."""


@functools.cache
def execute_tools() -> tuple[ToolSpec, ...]:
    """The worker's execute tools as the model is offered them, with their arguments' JSON Schema."""
    defs = bundle()["$defs"]
    return tuple(
        ToolSpec(name, spec.description, inline_refs(defs[spec.arguments.__name__], defs))
        for name, spec in WORKER_TOOLS.items()
    )


def add_parser(areas: Any) -> None:
    """`wuu exec` beside the other areas of the `wuu` command."""
    command = areas.add_parser(
        "exec",
        help="run the built-in engine once on a project, non-interactively",
        description="Put PROMPT before the built-in engine's model and run each tool call it asks for in a "
        "native worker bound to the project, in the permission mode of --permission-mode. Exit status: 0 "
        "completed, 3 completed with a refused call, 1 failed, 2 a usage or configuration error.",
    )
    command.add_argument("prompt", metavar="PROMPT", help="what to do")
    command.add_argument(
        "--permission-mode",
        choices=[mode.value for mode in PermissionMode],
        default=PermissionMode.STANDARD.value,
        help="the mode the calls run in (default: standard); nothing else selects it",
    )
    command.add_argument("--cd", metavar="DIR", help="the project directory (default: the working directory)")
    command.add_argument("--json", action="store_true", help="print the ExecRun JSON result on stdout")
    command.add_argument("--config", metavar="FILE", help="the absolute path of the user configuration file")
    command.add_argument("--home", metavar="DIR", help="Wuu home (default: $WUU_HOME, else ~/.wuu)")


def main(args: argparse.Namespace) -> int:
    """Run `wuu exec` with parsed `args`; its exit status."""
    try:
        root = _project(args.cd)
        model = _model(args.config, args.home)
    except UsageError as error:
        print(f"wuu exec: {error}", file=sys.stderr)
        return EXIT_USAGE
    mode = PermissionMode(args.permission_mode)
    run = asyncio.run(run_once(args.prompt, mode, root, model))
    if args.json:
        print(json.dumps(run.to_wire(), indent=2, ensure_ascii=False))
    else:
        for call in run.calls:
            print(f"wuu exec: {call.tool}: {_summary(call)}", file=sys.stderr)
        if run.failure is not None:
            print(f"wuu exec: the run failed: {run.failure}", file=sys.stderr)
        if run.text:
            print(run.text)
    if run.status is ExecRunStatus.FAILED:
        return EXIT_FAILED
    return (
        EXIT_REFUSED if any(call.outcome is ExecCallOutcome.REFUSED for call in run.calls) else EXIT_COMPLETED
    )


async def run_once(prompt: str, mode: PermissionMode, root: Path, model: ModelAdapter) -> ExecRun:
    """One run of `model` on `prompt`, its calls run by a native worker bound to `root` in `mode`."""
    calls: list[ExecCall] = []
    messages = [ChatMessage("system", GUIDANCE.format(mode=mode.value)), ChatMessage("user", prompt)]

    def ended(status: ExecRunStatus, text: str = "", failure: str | None = None) -> ExecRun:
        why = {} if failure is None else {"failure": failure}
        return ExecRun(permission_mode=mode, root=str(root), status=status, text=text, calls=calls, **why)

    worker = await WorkerClient.spawn([sys.executable, "-m", "wuu.worker"], record=False)
    try:
        reply = await worker.request("initialize", {"version": 4, "root": str(root), "session": SESSION})
        if "error" in reply:
            return ended(ExecRunStatus.FAILED, failure=f"the worker refused the project: {reply['error']}")
        loop = asyncio.get_running_loop()
        for _ in range(MAX_ROUNDS):
            try:
                answer = await model.complete(
                    messages, tools=execute_tools(), deadline=loop.time() + MODEL_CALL_SECONDS
                )
            except ModelUnavailable as error:
                return ended(ExecRunStatus.FAILED, failure=f"the model gave no usable reply: {error}")
            if not answer.tool_calls:
                return ended(ExecRunStatus.COMPLETED, text=answer.text)
            messages.append(ChatMessage("assistant", answer.text, tool_calls=answer.tool_calls))
            for call in answer.tool_calls:
                done = await _call(worker, mode, call.name, call.arguments)
                calls.append(done)
                messages.append(ChatMessage("tool", _told(done), tool_call_id=call.id))
        return ended(
            ExecRunStatus.FAILED, failure=f"the model asked for more than {MAX_ROUNDS} rounds of calls"
        )
    except ConnectionLost as error:
        return ended(ExecRunStatus.FAILED, failure=f"the worker ended: {error}")
    finally:
        await worker.close()


async def _call(worker: WorkerClient, mode: PermissionMode, tool: str, arguments: dict[str, Any]) -> ExecCall:
    """Run one call in the worker: what became of it."""
    data = {
        "tool": tool,
        "call": {"id": "wuu-exec", "arguments": json.dumps(arguments)},
        "actor": ACTOR,
        "permission_mode": mode.value,
    }
    reply = await worker.request("execute", data)
    error = reply.get("error")
    if isinstance(error, str):
        code, _ = split_error(error)
        refused = code in {refusal.value for refusal in REFUSALS}
        outcome = ExecCallOutcome.REFUSED if refused else ExecCallOutcome.ERROR
        return ExecCall(tool=tool, arguments=arguments, outcome=outcome, error=error)
    result = reply["data"]
    return ExecCall(
        tool=tool,
        arguments=arguments,
        outcome=ExecCallOutcome.RAN,
        output=result["output"],
        is_error=result["is_error"],
    )


def _told(call: ExecCall) -> str:
    """What the model is told of a call: its output, or `refused: ...` / `failed: ...` with the worker's error."""
    if call.outcome is ExecCallOutcome.RAN:
        return call.output or ""
    return f"{'refused' if call.outcome is ExecCallOutcome.REFUSED else 'failed'}: {call.error}"


def _summary(call: ExecCall) -> str:
    if call.outcome is ExecCallOutcome.RAN:
        return "ran, and failed" if call.is_error else "ran"
    return f"{call.outcome.value}: {call.error}"


def _project(given: str | None) -> Path:
    root = Path(given).resolve() if given is not None else Path.cwd()
    if not root.is_dir():
        raise UsageError(f"--cd: {given!r} is not a directory")
    return root


def _model(config: str | None, given_home: str | None) -> ModelAdapter:
    try:
        configured = load_configuration(config, home_of(given_home)).content.model
        return ModelConfig.parse(configured.to_wire() if configured is not None else {}).adapter()
    except (ConfigurationError, ModelConfigError) as error:
        raise UsageError(str(error)) from None
