"""One non-interactive run of the built-in Wuu engine (spec/schema/permissions/exec_run.schema.json, ExecRun):
`wuu exec` runs it, and a host that embeds the engine runs it with "Approve for me" when it wants to.

The prompt goes to the model with the worker's execute tools. Each call it asks for runs in a native worker
bound to the project directory in the run's permission mode: the worker's own checks allow or refuse it, and a
refusal is what the model is told. With Approve for me (approve_for_me.py, `standard` only) the calls it
selects are reviewed first, and only an `allow` sends one to the worker.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from pathlib import Path
from typing import Any

from wuu.generated.catalog import WORKER_TOOLS
from wuu.generated.models import (
    ApproveForMeReview,
    ApproveForMeVerdict,
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

from .approve_for_me import ApproveForMe, reviewed
from .personal.model import ChatMessage, ModelAdapter, ModelUnavailable, ToolSpec
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
NOT_RUN = {
    ApproveForMeVerdict.DENY: "not run: the review denied it ({reason})",
    ApproveForMeVerdict.UNRESOLVED: (
        "not run: the review left it to the user ({reason}). Explain the call to the user and ask them "
        "before trying it again."
    ),
    ApproveForMeVerdict.FAILED: "not run: the review failed ({reason})",
}
"""What the model is told of a call that Approve for me did not allow."""


@functools.cache
def execute_tools() -> tuple[ToolSpec, ...]:
    """The worker's execute tools as the model is offered them, with their arguments' JSON Schema."""
    defs = bundle()["$defs"]
    return tuple(
        ToolSpec(name, spec.description, inline_refs(defs[spec.arguments.__name__], defs))
        for name, spec in WORKER_TOOLS.items()
    )


async def run_once(
    prompt: str,
    mode: PermissionMode,
    root: Path,
    model: ModelAdapter,
    *,
    approve_for_me: ApproveForMe | None = None,
    deadline: float | None = None,
) -> ExecRun:
    """One run of `model` on `prompt`, its calls run by a native worker bound to `root` in `mode`; with
    `approve_for_me` (in `standard` only: ValueError otherwise) the calls it selects are reviewed first.
    `deadline` (the running loop's clock) bounds the reviews; the caller bounds the run itself."""
    if approve_for_me is not None and mode is not PermissionMode.STANDARD:
        raise ValueError(f"approve_for_me: Approve for me is an option of standard only, not {mode.value}")
    calls: list[ExecCall] = []
    messages = [ChatMessage("system", GUIDANCE.format(mode=mode.value)), ChatMessage("user", prompt)]

    def ended(status: ExecRunStatus, text: str = "", failure: str | None = None) -> ExecRun:
        extra: dict[str, Any] = {} if failure is None else {"failure": failure}
        if approve_for_me is not None:
            extra["approve_for_me"] = True
        return ExecRun(permission_mode=mode, root=str(root), status=status, text=text, calls=calls, **extra)

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
                review = None
                if approve_for_me is not None and reviewed(call.name, call.arguments):
                    review = await approve_for_me.review(prompt, call.name, call.arguments, deadline=deadline)
                if review is not None and review.verdict is not ApproveForMeVerdict.ALLOW:
                    done = ExecCall(
                        tool=call.name,
                        arguments=call.arguments,
                        outcome=ExecCallOutcome.NOT_RUN,
                        review=review,
                    )
                else:
                    done = await _call(worker, mode, call.name, call.arguments, review)
                calls.append(done)
                messages.append(ChatMessage("tool", _told(done), tool_call_id=call.id))
        return ended(
            ExecRunStatus.FAILED, failure=f"the model asked for more than {MAX_ROUNDS} rounds of calls"
        )
    except ConnectionLost as error:
        return ended(ExecRunStatus.FAILED, failure=f"the worker ended: {error}")
    finally:
        await worker.close()


async def _call(
    worker: WorkerClient,
    mode: PermissionMode,
    tool: str,
    arguments: dict[str, Any],
    review: ApproveForMeReview | None,
) -> ExecCall:
    """Run one call in the worker: what became of it."""
    data = {
        "tool": tool,
        "call": {"id": "wuu-exec", "arguments": json.dumps(arguments)},
        "actor": ACTOR,
        "permission_mode": mode.value,
    }
    reviewed_by: dict[str, Any] = {} if review is None else {"review": review}
    reply = await worker.request("execute", data)
    error = reply.get("error")
    if isinstance(error, str):
        code, _ = split_error(error)
        refused = code in {refusal.value for refusal in REFUSALS}
        outcome = ExecCallOutcome.REFUSED if refused else ExecCallOutcome.ERROR
        return ExecCall(tool=tool, arguments=arguments, outcome=outcome, error=error, **reviewed_by)
    result = reply["data"]
    return ExecCall(
        tool=tool,
        arguments=arguments,
        outcome=ExecCallOutcome.RAN,
        output=result["output"],
        is_error=result["is_error"],
        **reviewed_by,
    )


def _told(call: ExecCall) -> str:
    """What the model is told of a call: its output, `refused: ...` / `failed: ...` with the worker's error, or
    why Approve for me did not let it run."""
    if call.outcome is ExecCallOutcome.RAN:
        return call.output or ""
    if call.outcome is ExecCallOutcome.NOT_RUN:
        assert call.review is not None
        return NOT_RUN[call.review.verdict].format(reason=call.review.reason)
    return f"{'refused' if call.outcome is ExecCallOutcome.REFUSED else 'failed'}: {call.error}"
