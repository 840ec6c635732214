"""A step of the main agent answers its newest pending input and shows the model nothing newer: an input
admitted while the step is assembled waits for the next step, so what the step does (a card's request, a memory's
attribution, a task's admission authority) is bound to the input the model answered."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wuu.host.userhost.personal.agent import AgentStep, MainAgentLoop
from wuu.host.userhost.personal.provider import StepWindow, Submission
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain


def submission(main: str, n: int) -> Submission:
    return Submission(
        session_id=main,
        plugin_id="wuu.personal",
        client_input_id=f"in-{n}",
        request_id=f"req-{n}",
        text=f"input {n}",
        text_sha256="0" * 64,
        attachments=(),
        binding_digest=f"req-{n}",
    )


class AdmitsAfterTheWindow:
    """The store, admitting input 2 the first time a step has read its window, before the agent steps."""

    def __init__(self, store: SqliteSessionDomain) -> None:
        self.store = store
        self.admitted = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def step_window(
        self, session_id: str, waiting: int, recent: int, reactions: int
    ) -> StepWindow | None:
        window = await self.store.step_window(session_id, waiting, recent, reactions)
        if not self.admitted:
            self.admitted = True
            await self.store.admit(submission(session_id, 2), datetime.now(UTC))
        return window


async def test_an_input_admitted_while_a_step_is_assembled_waits_for_the_next_step(tmp_path: Path) -> None:
    store = await SqliteSessionDomain.open(tmp_path, "local", "personal", datetime.now(UTC))
    steps: list[tuple[list[str | None], list[str | None]]] = []

    class Recorder:
        async def step(self, step: AgentStep) -> None:
            pending = [message.client_input_id for message in step.pending]
            shown = [message.client_input_id for message in step.history if message.role == "user"]
            steps.append((pending, shown))
            await step.assemble(step.history)  # reads what it shows

    work: list[asyncio.Task[None]] = []

    def admit(coroutine: Coroutine[Any, Any, None]) -> None:
        work.append(asyncio.ensure_future(coroutine))

    async def unused(*arguments: Any) -> str:
        raise AssertionError("the recorder calls no tool")

    try:
        await store.admit(submission(store.main_session_id, 1), datetime.now(UTC))
        loop = MainAgentLoop(
            Recorder(), AdmitsAfterTheWindow(store), lambda: datetime.now(UTC), admit, lambda *a: None,
            unused, unused, unused,
        )  # fmt: skip
        loop.wake()
        await asyncio.wait_for(_idle(loop, work), 10)
        assert steps == [(["in-1"], ["in-1"]), (["in-2"], ["in-1", "in-2"])]
    finally:
        await store.close()


async def _idle(loop: MainAgentLoop, work: list[asyncio.Task[None]]) -> None:
    while work:
        await work.pop(0)
    await loop.idle.wait()
