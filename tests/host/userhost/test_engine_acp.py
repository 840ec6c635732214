"""The ACP adapter against a real ACP agent process (tests/host/userhost/fixtures/acp_agent.py, on the ACP Python
SDK): each permission mode applied through the agent's `category=mode` option, or its fallback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wuu.generated.models import AcpModeFallback, ExternalEngine, PermissionMode
from wuu.host.userhost.engines.acp import AcpEngine
from wuu.host.userhost.engines.table import EngineApproval, EngineFailed, EngineRefused

AGENT = Path(__file__).parent / "fixtures" / "acp_agent.py"
ALL_MODES = "default,plan,bypassPermissions"


def agent(*args: str) -> AcpEngine:
    return AcpEngine([sys.executable, str(AGENT), *args])


class Bridge:
    """The host's approval bridge, answering `answer` and keeping what it was asked."""

    def __init__(self, answer: bool | Exception) -> None:
        self.answer = answer
        self.asked: list[EngineApproval] = []

    async def __call__(self, approval: EngineApproval) -> bool:
        self.asked.append(approval)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("mode", "native"),
    [
        (PermissionMode.STANDARD, "default"),
        (PermissionMode.READ_ONLY, "plan"),
        (PermissionMode.UNCONFINED, "bypassPermissions"),
    ],
)
async def test_each_mode_is_applied_through_the_mode_option(
    tmp_path: Path, mode: PermissionMode, native: str
) -> None:
    async with agent("--modes", ALL_MODES).open(mode, tmp_path, Bridge(False)) as session:
        assert (session.mode_id, session.fallback) == (native, None)
        turn = await session.prompt("hello")
    assert (turn.text, turn.stop_reason) == (f"mode={native} permission=none", "end_turn")


async def test_the_first_listed_id_the_agent_offers_wins(tmp_path: Path) -> None:
    async with agent("--modes", "ask,agent").open(
        PermissionMode.STANDARD, tmp_path, Bridge(False)
    ) as session:
        assert session.mode_id == "agent"
        assert session.native_modes == {"ask": "Ask", "agent": "Agent"}, "the labels a composer shows"
        assert (await session.prompt("hi")).text == "mode=agent permission=none"


async def test_standard_without_a_prompting_mode_puts_requests_to_the_bridge(tmp_path: Path) -> None:
    bridge = Bridge(True)
    async with agent("--modes", "plan").open(PermissionMode.STANDARD, tmp_path, bridge) as session:
        assert (session.mode_id, session.fallback) == (None, AcpModeFallback.HOST_APPROVAL_BRIDGE)
        allowed = await session.prompt("ask write notes.txt")
        bridge.answer = False
        denied = await session.prompt("ask delete notes.txt")
    # The agent keeps its own mode; an allow is for this request only (never allow-always).
    assert allowed.text == "mode=plan permission=yes-once"
    assert denied.text == "mode=plan permission=no-once"
    assert [(a.engine, a.mode, a.title) for a in bridge.asked] == [
        (ExternalEngine.ACP, PermissionMode.STANDARD, "write notes.txt"),
        (ExternalEngine.ACP, PermissionMode.STANDARD, "delete notes.txt"),
    ]
    assert bridge.asked[0].request["toolCall"]["toolCallId"] == "call-1"


async def test_a_bridge_that_fails_denies(tmp_path: Path) -> None:
    bridge = Bridge(RuntimeError("the host's bridge broke"))
    async with agent().open(PermissionMode.STANDARD, tmp_path, bridge) as session:
        assert (await session.prompt("ask run make")).text == "mode=- permission=no-once"
    assert len(bridge.asked) == 1


async def test_a_permission_request_in_an_applied_mode_goes_to_the_bridge(tmp_path: Path) -> None:
    bridge = Bridge(False)
    async with agent("--modes", ALL_MODES).open(PermissionMode.READ_ONLY, tmp_path, bridge) as session:
        assert (await session.prompt("ask write notes.txt")).text == "mode=plan permission=no-once"
    assert [a.title for a in bridge.asked] == ["write notes.txt"]


async def test_read_only_without_a_read_only_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineRefused, match=r"no mode for read_only .*\['default', 'agent'\]"):
        async with agent("--modes", "default,agent").open(PermissionMode.READ_ONLY, tmp_path, Bridge(True)):
            pytest.fail("a refused mode opened a session")


async def test_unconfined_without_a_no_prompts_mode_accepts_each_request_once(tmp_path: Path) -> None:
    bridge = Bridge(False)
    async with agent("--modes", "default").open(PermissionMode.UNCONFINED, tmp_path, bridge) as session:
        assert (session.mode_id, session.fallback) == (None, AcpModeFallback.AUTO_ACCEPT_ONCE)
        assert (await session.prompt("ask rm -rf build")).text == "mode=default permission=yes-once"
    assert bridge.asked == []


async def test_an_agent_that_keeps_another_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        EngineRefused, match=r"reports mode 'default' after Wuu selected 'plan' for read_only"
    ):
        async with agent("--modes", ALL_MODES, "--sticky").open(
            PermissionMode.READ_ONLY, tmp_path, Bridge(True)
        ):
            pytest.fail("a session opened in a mode the agent did not take")


async def test_an_agent_that_dies_is_a_failure_with_what_it_said(tmp_path: Path) -> None:
    engine = AcpEngine([sys.executable, "-c", "import sys; sys.stderr.write('no credentials'); sys.exit(3)"])
    with pytest.raises(EngineFailed, match="no credentials"):
        async with engine.open(PermissionMode.STANDARD, tmp_path, Bridge(True)):
            pytest.fail("a dead agent opened a session")
