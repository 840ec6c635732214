"""The user host's figures: a cheap request's round trip over the Unix socket and over gRPC, and 16 clients
pipelining on the socket, each beside a raw baseline of the same transport.

The host is the real command (`python -m wuu.host.userhost serve --listen unix:... --grpc unix:...`), with
no plugin; the cheap request is `plugin/client/cancel` of an id nobody uses, which every host answers at
once with `{"cancelled": false}` after the envelope, method, state and params checks. The baselines answer
the same request with the same result and none of the rules: `jsonrpc_echo.py` on NDJSON (through the same
typed client call, the host, the echo and the bench pinned to one CPU for the round trip) and
`grpc_echo.py` on gRPC (raw requests, unpinned).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from wuu.generated.models import PluginClientCancelParams
from wuu.generated.pb.wuu.userhost.v1 import userhost_pb2
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_wire import MESSAGE_OPTIONS, RPCS

from .config import IN_FLIGHT, Config
from .round_trips import placed, round_trips
from .samples import Samples, alternate, percentile

HERE = Path(__file__).resolve().parent
CLIENTS = 16  # the most a host serves at once
CHEAP = PluginClientCancelParams(id=0)
START_DEADLINE_S = 30.0

Call = Callable[[], Awaitable[object]]


class UserHostSides:
    """A user host and the two baselines, running, with a client of each socket."""

    def __init__(self, directory: Path) -> None:
        """Everything of the sides goes to `directory` (created private; short: it holds sockets)."""
        self.dir = directory
        self.processes: list[asyncio.subprocess.Process] = []
        self.host: UserHostClient
        self.echo: UserHostClient
        self.grpc: UserHostGrpcClient | None = None
        self.grpc_echo: grpc.aio.Channel
        self.extra: list[UserHostClient] = []

    async def __aenter__(self) -> UserHostSides:
        self.dir.mkdir(mode=0o700)
        await self._spawn(
            "-m", "wuu.host.userhost", "serve", "--user-space", "bench", "--product-domain", "personal",
            "--home", str(self.dir / "home"), "--listen", f"unix:{self.dir}/host.sock",
            "--grpc", f"unix:{self.dir}/grpc.sock",
        )  # fmt: skip
        await self._spawn(str(HERE / "jsonrpc_echo.py"), str(self.dir / "echo.sock"))
        await self._spawn(str(HERE / "grpc_echo.py"), str(self.dir / "grpc-echo.sock"))
        self.host = await self._connect("host.sock")
        await self.host.initialize()
        self.echo = await self._connect("echo.sock")
        await self._ready(self.dir / "grpc-echo.sock")
        self.grpc_echo = grpc.aio.insecure_channel(f"unix:{self.dir}/grpc-echo.sock", options=MESSAGE_OPTIONS)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close_extra()
        await self.host.close()
        await self.echo.close()
        if self.grpc is not None:
            await self.grpc.close()
        await self.grpc_echo.close()
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            await process.wait()

    async def _spawn(self, *argv: str) -> None:
        """Start a side; its stderr (the host's JSON-line log) goes to a file beside its socket."""
        with open(self.dir / f"{len(self.processes)}.log", "wb") as log:
            self.processes.append(await asyncio.create_subprocess_exec(sys.executable, *argv, stderr=log))

    async def _ready(self, socket: Path) -> None:
        """Wait until `socket` exists (a server creates it once it listens)."""
        deadline = time.monotonic() + START_DEADLINE_S
        while not socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{socket}: nobody listens there after {START_DEADLINE_S:g} s")
            await asyncio.sleep(0.02)

    async def _connect(self, name: str) -> UserHostClient:
        """A client of the socket `name`, once its server listens (the path appears at `bind`, a moment
        before `listen`: a connection refused meanwhile is tried again)."""
        await self._ready(self.dir / name)
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            try:
                return await UserHostClient.connect_unix(self.dir / name)
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.02)

    async def fleets(self) -> dict[str, list[UserHostClient]]:
        """16 clients of each socket: the first client and 15 more (the host's are initialized)."""
        host = [await self._connect("host.sock") for _ in range(CLIENTS - 1)]
        echo = [await self._connect("echo.sock") for _ in range(CLIENTS - 1)]
        self.extra += host + echo
        await asyncio.gather(*(client.initialize() for client in host))
        return {"unix": [self.host, *host], "unix_echo": [self.echo, *echo]}

    def unix_pids(self) -> list[int]:
        """The processes behind the Unix socket pair: the host and the NDJSON echo."""
        return [self.processes[0].pid, self.processes[1].pid]

    async def close_extra(self) -> None:
        """Close the clients `fleets` added; once a close returns, the host has detached that client."""
        for client in self.extra:
            await client.close()
        self.extra.clear()

    async def calls(self) -> dict[str, Call]:
        """The cheap request on each side: the typed clients on the host (a gRPC connection is opened for
        it), raw requests on the baselines."""
        await self._ready(self.dir / "grpc.sock")
        self.grpc = await UserHostGrpcClient.connect(f"unix:{self.dir}/grpc.sock")
        await self.grpc.initialize()
        raw = self.grpc_echo.unary_unary(
            RPCS["plugin/client/cancel"].path,
            request_serializer=userhost_pb2.PluginClientCancelParams.SerializeToString,
            response_deserializer=userhost_pb2.PluginClientCancelResult.FromString,
        )
        raw_request = userhost_pb2.PluginClientCancelParams()
        raw_request.id.number_value = 0
        grpc_client = self.grpc
        return {
            "unix": lambda: self.host.plugin_client_cancel(CHEAP),
            # The same typed call: the echo answers the host's result, which the client decodes alike.
            "unix_echo": lambda: self.echo.plugin_client_cancel(CHEAP),
            "grpc": lambda: grpc_client.plugin_client_cancel(CHEAP),
            "grpc_echo": lambda: raw(raw_request),
        }


async def userhost_round(config: Config, samples: Samples, directory: Path, index: int) -> None:
    """Round `index` of the user host's figures, with sides of its own in `directory`: first 16 clients of
    each socket (the host's limit), then, once 15 of them have gone, the round trips."""
    async with UserHostSides(directory) as sides:
        fleets = await sides.fleets()
        for side in alternate(("unix", "unix_echo"), index):
            await pipelined_fleet(fleets[side], config.warmup)
            samples.add(
                f"userhost_clients/{side}", await pipelined_fleet(fleets[side], config.userhost_pipelined)
            )
        await sides.close_extra()
        calls = await sides.calls()
        latencies: dict[str, list[float]] = defaultdict(list)
        for call in calls.values():
            await round_trips(call, config.warmup)
        for pair in (("unix", "unix_echo"), ("grpc", "grpc_echo")):
            # The socket's pair runs on one CPU, as the worker's round trips do; gRPC's own threads are
            # left where its library puts them.
            placement = (
                placed(sides.unix_pids(), apart=False) if pair[0] == "unix" else contextlib.nullcontext()
            )
            with placement:
                for block in range(config.rtt_blocks):
                    for side in alternate(pair, index + block):
                        latencies[side] += await round_trips(
                            calls[side], config.rtt_requests // config.rtt_blocks
                        )
        for side, values in latencies.items():
            samples.add(f"userhost_rtt_p50/{side}", percentile(values, 0.50))
            samples.add(f"userhost_rtt_p99/{side}", percentile(values, 0.99))


async def pipelined_fleet(clients: list[UserHostClient], count: int) -> float:
    """Requests per second with IN_FLIGHT cheap requests outstanding, spread evenly over `clients`,
    `count` in all."""
    remaining = count

    async def lane(client: UserHostClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            reply = await client.request("plugin/client/cancel", {"id": 0})
            if "result" not in reply:
                raise RuntimeError(f"the cheap request failed: {reply}")

    began = time.perf_counter()
    await asyncio.gather(*(lane(clients[lane_index % len(clients)]) for lane_index in range(IN_FLIGHT)))
    return count / (time.perf_counter() - began)
