"""\"Approve for me\" (spec/schema/permissions/exec_run.schema.json, ApproveForMeReview): model review before
selected tool calls of the built-in engine in `standard`.

`reviewed` says which calls go to review; `ApproveForMe.review` asks the run's own model once, through the
shared reviewer (personal/reviewer.py: text only, no tools offered), within 90 seconds and the run's own
deadline. Only `allow` lets a call run; the call then still runs in `standard` under every check of the
worker, so a review can never elevate a call or lift a guard.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wuu.generated.catalog import WORKER_TOOLS
from wuu.generated.models import ApproveForMeReview, ApproveForMeVerdict

from .personal.model import ModelAdapter
from .personal.reviewer import Reviewer

REVIEW_SECONDS = 90.0
"""The most a review may take (less when the run has less left)."""
VERDICTS = {
    "allow": ApproveForMeVerdict.ALLOW,
    "deny": ApproveForMeVerdict.DENY,
    "unsure": ApproveForMeVerdict.UNRESOLVED,
    "unavailable": ApproveForMeVerdict.FAILED,
}
"""The shared reviewer's verdicts in Approve for me's words."""


def reviewed(tool: str, arguments: Mapping[str, Any]) -> bool:
    """Whether a call goes to review: a tool that runs a command or changes files or a repository, and
    `git_branch` creating a branch. Any tool outside the catalog of low-risk reads (a process or MCP action)
    is reviewed too."""
    spec = WORKER_TOOLS.get(tool)
    if spec is None or spec.runs_commands or spec.mutating:
        return True
    return tool == "git_branch" and arguments.get("create") is not None


class ApproveForMe:
    """Reviews calls with the run's model, `timeout` seconds at most each."""

    def __init__(self, model: ModelAdapter, *, timeout: float = REVIEW_SECONDS) -> None:
        self._reviewer = Reviewer(model, timeout=timeout)

    async def review(
        self, request: str, tool: str, arguments: Mapping[str, Any], *, deadline: float | None = None
    ) -> ApproveForMeReview:
        """The verdict on one call, given the user's `request`, by `deadline` (the running loop's clock) at
        the latest."""
        action = {"tool": tool, "arguments": dict(arguments)}
        summary = f"{tool} {json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)}"
        verdict = await self._reviewer.review(request, action, summary, deadline=deadline)
        return ApproveForMeReview(
            verdict=VERDICTS[verdict.verdict], reason=verdict.reason or "No reason given."
        )
