""" "Approve for me": the built-in engine's run in `standard` with model review before the calls it selects,
the calls run by a real native worker (spec/schema/permissions/exec_run.schema.json, ApproveForMeReview)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from wuu.generated import validators
from wuu.generated.catalog import WORKER_TOOLS
from wuu.generated.models import ExecRun, PermissionMode
from wuu.host.userhost.approve_for_me import ApproveForMe, reviewed
from wuu.host.userhost.builtin_engine import run_once
from wuu.host.userhost.personal.model import ChatMessage, ModelReply, ModelUnavailable, ToolCall, ToolSpec

REQUEST = "Run the tests and write the summary to notes.txt"


class Model:
    """The run's model: as the agent (tools offered) it asks for `calls`, one per round, then answers `done`;
    as the reviewer (no tools) it answers `verdict` ("allow", "deny", "unsure"), or raises or stalls."""

    name = "scripted"

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]], verdict: str | BaseException) -> None:
        self._calls = list(calls)
        self.verdict = verdict
        self.reviews: list[Sequence[ChatMessage]] = []
        self.review_tools: list[Sequence[ToolSpec]] = []

    async def complete(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[ToolSpec] = (), deadline: float
    ) -> ModelReply:
        if not tools:
            self.reviews.append(messages)
            self.review_tools.append(tools)
            if self.verdict == "stall":
                await asyncio.sleep(3600)
            if isinstance(self.verdict, BaseException):
                raise self.verdict
            return ModelReply(
                json.dumps({"verdict": self.verdict, "reason": f"the reviewer says {self.verdict}"})
            )
        if not self._calls:
            return ModelReply("done: " + messages[-1].text)
        name, arguments = self._calls.pop(0)
        return ModelReply("", (ToolCall(f"c{len(self._calls)}", name, arguments),))


def touch(name: str) -> tuple[str, dict[str, Any]]:
    return ("exec_command", {"argv": ["touch", name], "cwd": ".", "env": {}, "timeout_ms": 60000})


async def run(root: Path, model: Model, *, timeout: float = 90.0, deadline: float | None = None) -> ExecRun:
    result = await run_once(
        REQUEST,
        PermissionMode.STANDARD,
        root,
        model,
        approve_for_me=ApproveForMe(model, timeout=timeout),
        deadline=deadline,
    )
    assert validators.errors("ExecRun", result.to_wire()) == []
    return result


def test_what_is_reviewed() -> None:
    assert {tool for tool in WORKER_TOOLS if reviewed(tool, {})} == {
        "exec_command", "write_file", "edit_file", "git_add", "git_commit", "git_checkout"
    }  # fmt: skip
    assert reviewed("exec_command", {"argv": ["ls"]}), "a read-only command is reviewed too"
    assert reviewed("git_branch", {"create": "topic"}) and not reviewed("git_branch", {})
    assert reviewed("process_start", {}) and reviewed("mcp_call", {}), "an action outside the catalog's reads"


async def test_an_allowed_command_runs(tmp_path: Path) -> None:
    model = Model([touch("ran.txt")], "allow")
    result = await run(tmp_path, model)
    assert (tmp_path / "ran.txt").exists()
    [call] = result.to_wire()["calls"]
    assert (call["outcome"], call["review"]["verdict"]) == ("ran", "allow")
    assert result.to_wire()["approve_for_me"] is True
    # One text-only request on the user's request and the exact call.
    [review] = model.reviews
    assert model.review_tools == [()]
    asked = json.loads(review[-1].text)
    assert asked["request"] == REQUEST
    assert asked["action"] == {"tool": "exec_command", "arguments": touch("ran.txt")[1]}


@pytest.mark.parametrize(
    ("verdict", "outcome", "told"),
    [
        ("deny", "deny", "not run: the review denied it (the reviewer says deny)"),
        (
            "unsure",
            "unresolved",
            "not run: the review left it to the user (the reviewer says unsure). Explain",
        ),
    ],
)
async def test_a_call_the_review_does_not_allow_never_runs(
    tmp_path: Path, verdict: str, outcome: str, told: str
) -> None:
    result = await run(tmp_path, Model([touch("ran.txt")], verdict))
    assert not (tmp_path / "ran.txt").exists()
    [call] = result.to_wire()["calls"]
    assert (call["outcome"], call["review"]["verdict"]) == ("not_run", outcome)
    assert result.text.startswith(f"done: {told}")


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (
            ModelUnavailable("the endpoint answered 503"),
            "The review model is unavailable: the endpoint answered 503",
        ),
        (RuntimeError("boom"), "The review model failed."),
        ("stall", "No review within 0.2 s."),
        ("a verdict", "The reviewer's answer was not the expected JSON"),
    ],
)
async def test_a_failed_review_leaves_the_call_unrun(tmp_path: Path, behaviour: Any, reason: str) -> None:
    if behaviour == "a verdict":
        behaviour = "perhaps"  # not one of the verdicts: the reviewer cannot tell
    result = await run(tmp_path, Model([touch("ran.txt")], behaviour), timeout=0.2)
    assert not (tmp_path / "ran.txt").exists()
    [call] = result.to_wire()["calls"]
    assert call["outcome"] == "not_run"
    assert call["review"]["verdict"] == ("unresolved" if behaviour == "perhaps" else "failed")
    assert call["review"]["reason"].startswith(reason)


async def test_the_run_deadline_bounds_a_review(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run(tmp_path, Model([touch("ran.txt")], "stall"), deadline=started + 0.3)
    assert loop.time() - started < 30, "the review waited for its own 90 s instead of the run's deadline"
    [call] = result.to_wire()["calls"]
    assert call["review"] == {"verdict": "failed", "reason": "No review within the time left to its run."}


async def test_a_cancelled_review_runs_nothing(tmp_path: Path) -> None:
    model = Model([touch("ran.txt")], "stall")
    task = asyncio.create_task(run(tmp_path, model))
    async with asyncio.timeout(30):
        while not model.reviews:
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not (tmp_path / "ran.txt").exists()


async def test_low_risk_reads_are_not_reviewed(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    model = Model([("read_file", {"path": "notes.txt"}), ("list_dir", {"path": "."})], "deny")
    result = await run(tmp_path, model)
    assert [(c["outcome"], "review" in c) for c in result.to_wire()["calls"]] == [
        ("ran", False),
        ("ran", False),
    ]
    assert model.reviews == []


async def test_an_allow_lifts_no_sensitive_path_guard(tmp_path: Path) -> None:
    model = Model([("write_file", {"path": ".env", "content": "TOKEN=x\n", "create_dirs": True})], "allow")
    result = await run(tmp_path, model)
    assert not (tmp_path / ".env").exists()
    [call] = result.to_wire()["calls"]
    assert (call["outcome"], call["review"]["verdict"]) == ("refused", "allow")
    assert call["error"].startswith("sensitive_path: ")


@pytest.mark.parametrize("mode", [PermissionMode.READ_ONLY, PermissionMode.UNCONFINED])
async def test_approve_for_me_is_standard_only(tmp_path: Path, mode: PermissionMode) -> None:
    model = Model([touch("ran.txt")], "allow")
    with pytest.raises(ValueError, match=f"standard only, not {mode.value}"):
        await run_once(REQUEST, mode, tmp_path, model, approve_for_me=ApproveForMe(model))
    assert not (tmp_path / "ran.txt").exists()
