"""The network policy of confined commands: the binding's `command_network` (spec: worker/initialize.schema.json,
InitializeParams `command_network` and CommandNetwork).

The probes are python3 one-liners; the case is skipped, saying so, where the adapter runs no confined commands
or has no python3.
"""

from __future__ import annotations

from ..session import Session
from ..suite import WORKER
from .tools import answer, run, runs_commands

BIND = "import socket; socket.socket().bind(('127.0.0.1', 0)); print('bound')"
CONNECT = "import socket; socket.socket().connect(('127.0.0.1', 9))"


async def python(s: Session, mode: str, source: str) -> dict[str, object]:
    """The ToolResult of `python3 -c source` in `mode`."""
    reply = await run(s, "exec_command", mode, argv=["python3", "-c", source])
    s.expect("data" in reply, f"exec_command of python3 in {mode} failed: {answer(reply)}")
    data: dict[str, object] = reply["data"]
    return data


@WORKER.case("network.no-tcp")
async def no_tcp(s: Session) -> None:
    """Under `command_network: no_tcp` a confined command can neither bind a TCP socket (port 0 included)
    nor connect one, while an unconfined command still can."""
    await s.initialize(command_network="no_tcp")
    if await runs_commands(s) != "standard":
        s.skip("the adapter runs no confined commands")
    if (await python(s, "standard", "pass"))["is_error"]:
        s.skip("the adapter's environment has no python3 to probe the network with")
    for mode in ("standard", "read_only"):
        for what, source in (("binding", BIND), ("connecting", CONNECT)):
            data = await python(s, mode, source)
            s.expect(
                data["is_error"] is True and "PermissionError" in str(data["output"]),
                f"a {mode} command {what} a TCP socket under no_tcp was not refused: {data['output']!r}",
            )
    data = await python(s, "unconfined", BIND)
    s.expect(
        data["output"] == "bound\n",
        f"an unconfined command could not bind a TCP socket under no_tcp: {data['output']!r}",
    )
