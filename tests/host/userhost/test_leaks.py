"""Faults and churn leave nothing behind in a user host: a client killed with a call in flight, and 100
connect/initialize/call/disconnect cycles over the Unix socket and over gRPC, end with the host's asyncio
tasks, sockets and Python memory as they were and other descriptors within a bound (polled until the host is
idle, with a deadline).

The host runs in the test's process, so its tasks, its descriptors (/proc/self/fd) and its allocations
(tracemalloc) are the test's to count; a warm-up cycle first creates what is made once per process.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, until
from tests.host.userhost.test_fuzz import INITIALIZE, request
from wuu.generated.models import AgentsMainSessionParams, AgentsMainSessionResult
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import ClientSurface, UserHostClient
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_service import GrpcServer

CYCLES = 100
OTHER_FD_BOUND = 4
"""Descriptors other than sockets that may be open after the cycles and were not before: gRPC core opens
eventfds and pipes for poller and executor threads it starts under load, once; a leak per cycle opens
CYCLES of them."""
MEMORY_BOUND = 256 * 1024
"""Python memory the 100 cycles may leave allocated: under 2.6 KiB a cycle, less than one client's session,
outbox and reader (a leak of any of them per cycle exceeds it)."""


@dataclass
class Resources:
    """What the process holds at one moment: its tasks by what they run, and its open descriptors.

    Tasks are counted by their coroutine's name, not compared one by one: a server keeps one task waiting for
    the next call (grpc's `_request_call`) and replaces it with a new one at every call.
    """

    tasks: Counter[str]
    sockets: int
    other_fds: int

    @classmethod
    def now(cls) -> Resources:
        current = asyncio.current_task()
        tasks = Counter(task_name(task) for task in asyncio.all_tasks() if task is not current)
        kinds = Counter(fd_kind(fd) for fd in os.listdir("/proc/self/fd"))
        return cls(tasks, kinds["socket"], kinds["other"])

    def settled_since(self, before: Resources) -> bool:
        """No more tasks of any kind and no more sockets than `before`, and other descriptors within bound."""
        return (
            not (self.tasks - before.tasks)
            and self.sockets <= before.sockets
            and self.other_fds <= before.other_fds + OTHER_FD_BOUND
        )


def fd_kind(fd: str) -> str:
    """`socket` for a socket descriptor, `other` for anything else (one closed meanwhile included)."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return "other"
    return "socket" if target.startswith("socket:") else "other"


def task_name(task: asyncio.Task[object]) -> str:
    coroutine = task.get_coro()
    return str(getattr(coroutine, "__qualname__", coroutine))


async def back_to(before: Resources, what: str, timeout_s: float = DEADLINE) -> None:
    """Wait until no more tasks are running than `before` (of each kind), no more sockets open, and other
    descriptors within OTHER_FD_BOUND."""
    try:
        await until(lambda: Resources.now().settled_since(before), what, timeout_s)
    except AssertionError:
        now = Resources.now()
        raise AssertionError(
            f"{what}: tasks left {dict(now.tasks - before.tasks)}, {now.sockets} sockets open for "
            f"{before.sockets}, {now.other_fds} other descriptors for {before.other_fds}"
        ) from None


async def python_memory_growth(
    cycle: Callable[[], Awaitable[None]], settle: Callable[[], Awaitable[None]]
) -> int:
    """Bytes of Python memory still allocated after CYCLES runs of `cycle` and `settle` than before them."""
    tracemalloc.start()
    try:
        gc.collect()
        start, snapshot = tracemalloc.get_traced_memory()[0], tracemalloc.take_snapshot()
        for _ in range(CYCLES):
            await cycle()
        await settle()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
        if grown >= MEMORY_BOUND:
            top = tracemalloc.take_snapshot().compare_to(snapshot, "lineno")[:8]
            raise AssertionError(f"{grown} bytes more after {CYCLES} cycles: " + "; ".join(map(str, top)))
        return grown
    finally:
        tracemalloc.stop()


async def test_a_client_killed_with_a_call_in_flight_leaves_nothing(
    host: UserHost, server: UnixServer
) -> None:
    async def killed_mid_call() -> None:
        reader, writer = await asyncio.open_unix_connection(str(server.path))
        writer.write(request(1, "initialize", INITIALIZE))
        assert b'"result"' in await reader.readline()
        search = {"plugin_id": "wuu.test", "method": "agents.history.search"}
        # The call would sleep 30 s: being gone well before the deadline (20 s), it was stopped, not finished.
        writer.write(
            request(
                2, "plugin/client/request", {**search, "params": {"session_id": "m", "query": "sleep:30"}}
            )
        )
        await until(lambda: Resources.now().tasks["ClientSession._run_plugin"], "the call to run")
        writer.transport.abort()
        await until(lambda: host.clients == 0, "the host to detach the killed client")

    await killed_mid_call()  # the warm-up: what is created once per process
    before = Resources.now()
    await killed_mid_call()
    await back_to(before, "the killed client's call and connection to end")

    async def settle() -> None:
        await back_to(before, "the killed clients' calls and connections to end")

    await python_memory_growth(killed_mid_call, settle)
    await back_to(before, "the host to be idle after the kills")


async def call_cycle(open_client: Callable[[], Awaitable[ClientSurface]]) -> None:
    """Connect, initialize, call the cheap plugin method, disconnect."""
    client = await open_client()
    await client.initialize()
    result = await client.plugin_call("wuu.test", "agents.main_session", AgentsMainSessionParams())
    assert isinstance(result, AgentsMainSessionResult) and result.session_id == "main"
    await client.close()


async def test_unix_socket_churn_leaves_nothing(host: UserHost, server: UnixServer) -> None:
    async def cycle() -> None:
        await call_cycle(lambda: UserHostClient.connect_unix(server.path))

    await cycle()
    await until(lambda: host.clients == 0, "the warm-up client to detach")
    before = Resources.now()

    async def settle() -> None:
        await until(lambda: host.clients == 0, "every client to detach")
        await back_to(before, f"the host to be idle after {CYCLES} cycles")

    await python_memory_growth(cycle, settle)
    assert host.clients == 0


@pytest.fixture
async def grpc_server(host: UserHost, run_dir: Path) -> AsyncIterator[GrpcServer]:
    """The host's gRPC server on a Unix socket."""
    served = await GrpcServer.start(host, f"unix:{run_dir / 'grpc.sock'}")
    yield served
    await served.close()


async def test_grpc_churn_leaves_nothing(host: UserHost, grpc_server: GrpcServer) -> None:
    async def cycle() -> None:
        await call_cycle(lambda: UserHostGrpcClient.connect(grpc_server.address))

    def idle() -> bool:
        return not grpc_server.connections and host.clients == 0

    await cycle()
    await until(idle, "the warm-up connection to end")
    before = Resources.now()

    async def settle() -> None:
        await until(idle, "every gRPC connection to end")
        await back_to(before, f"the gRPC server to be idle after {CYCLES} cycles")

    await python_memory_growth(cycle, settle)
    assert idle()
