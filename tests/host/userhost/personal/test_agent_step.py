"""A step of the main agent answers its newest pending input and shows the model nothing newer: an input
admitted while the step is assembled waits for the next step, so what the step does (a card's request, a memory's
attribution, a task's admission authority) is bound to the input the model answered; and an agent that declines
what waits is offered it again after a gather that doubles at each decline, up to its cap."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wuu.host.userhost.personal.agent import STEP_GATHER_MAX_S, STEP_GATHER_S, AgentStep, MainAgentLoop
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


async def test_a_declined_window_is_offered_again_after_a_gather_that_doubles_up_to_its_cap(
    tmp_path: Path,
) -> None:
    store = await SqliteSessionDomain.open(tmp_path, "local", "personal", datetime.now(UTC))
    started: list[float] = []
    gathers: list[float] = []
    reading = False

    class Decliner:
        async def step(self, step: AgentStep) -> None:
            started.append(asyncio.get_running_loop().time())
            if reading:
                await step.assemble(step.history)

    work: list[asyncio.Task[None]] = []

    def admit(coroutine: Coroutine[Any, Any, None]) -> None:
        work.append(asyncio.ensure_future(coroutine))

    async def unused(*arguments: Any) -> str:
        raise AssertionError("the agent calls no tool")

    async def step_after_a_new_input(n: int) -> None:
        await store.admit(submission(store.main_session_id, n), datetime.now(UTC))
        gather, woken = loop.step_gather_s, asyncio.get_running_loop().time()
        loop.wake()
        await asyncio.wait_for(_idle(loop, work), 10)
        assert started[-1] - woken >= gather
        gathers.append(loop.step_gather_s)

    try:
        loop = MainAgentLoop(
            Decliner(), store, lambda: datetime.now(UTC), admit, lambda *a: None, unused, unused, unused
        )
        assert loop.step_gather_s == STEP_GATHER_S
        for n in range(7):
            await step_after_a_new_input(n)
        reading = True
        await step_after_a_new_input(7)
        assert len(started) == 8, "one step per wake"
        doubled = [STEP_GATHER_S * 2**declines for declines in (1, 2, 3, 4)]
        assert gathers == [*doubled, STEP_GATHER_MAX_S, STEP_GATHER_MAX_S, STEP_GATHER_MAX_S, STEP_GATHER_S]
    finally:
        await store.close()
