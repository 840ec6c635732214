"""The host transport of the cloud backends (`modal`, `daytona`, `vercel`): it provisions the sandbox through
the provider's own Python SDK, runs the worker in it, and relays this process's stdio to the worker's.

The adapter (`cloud.py`) runs it as `PYTHON -I cloud_transport.py CONFIG`, where PYTHON is the profile's
`python` (an interpreter with the provider's SDK) or the host's own. So it imports nothing of wuu: only
the standard library and the SDK, and `-I` keeps this directory off sys.path. CONFIG is the JSON object
`Config` describes.

The relay: host -> worker a line at a time (a frame per line: the worker judges each one), worker -> host
as the output comes, the worker's stderr onto ours. At the host's EOF the worker's input is closed (the
Daytona worker runs behind a filter that ends its input at a marker line, as the provider's sessions have
no EOF of their own) and the worker's exit awaited; the exit status is the worker's.

Retention (`persistent`): Modal keeps a snapshot of the sandbox's filesystem, whose image ID is recorded in
the `state` file (and the sandbox is terminated); Daytona stops the sandbox, named for the conversation;
Vercel stops its persistent sandbox, named for the conversation. Without retention the sandbox is deleted
at a clean close. When this connection found nothing retained, the worker is told so
(`--new-environment`): a reconnect's binding (`require_existing_workspace`) is refused with
`workspace_missing`, and nothing is retained for it. A worker that exits non-zero leaves its sandbox as it
is (until the provider's lifetime ends it), for inspection.

Credentials: the SDK's own login only (its environment variables and files, read by the SDK in this
process). The sandbox gets no environment variable from here: the worker's commands see only what the
binding forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import secrets
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypedDict

MAX_FRAME_BYTES = 16 * 1024 * 1024  # the protocol's WORKER_MAX_FRAME_BYTES, newline included
IMAGE_WORKER = ["python3", "-m", "wuu.worker"]
MODAL_APP = "wuu"
SDKS = {"modal": "modal", "daytona": "daytona", "vercel": "vercel-sandbox"}


class Config(TypedDict):
    """What the adapter tells the transport (`cloud.py` builds it from the profile)."""

    backend: str
    image: str
    cpus: float | None
    memory_mb: int | None
    network: str  # CloudNetworkMode: none | outbound
    lifetime_seconds: int
    persistent: bool
    worker: list[str] | None  # the profile's own worker command, else None: the image's
    name: str  # the sandbox's name: per conversation when persistent, else unique
    state: str | None  # Modal: where the retained snapshot's image ID is recorded


class Worker(Protocol):
    """The worker process in a sandbox, as each provider's SDK runs it."""

    async def send(self, line: bytes) -> None: ...
    async def close_input(self) -> None: ...
    def output(self) -> AsyncIterator[bytes]: ...
    async def wait(self) -> int: ...


def worker_argv(config: Config, new: bool) -> list[str]:
    """The worker command: the profile's as given, else the image's (told when nothing was retained)."""
    if config["worker"]:
        return list(config["worker"])
    return [*IMAGE_WORKER, "--new-environment"] if new else list(IMAGE_WORKER)


def is_reconnect(line: bytes) -> bool:
    """Whether a host frame is an `initialize` that requires the existing workspace."""
    if b"require_existing_workspace" not in line:
        return False
    try:
        frame = json.loads(line)
    except ValueError:
        return False
    data = frame.get("data") if isinstance(frame, dict) else None
    return (
        frame.get("method") == "initialize"
        and isinstance(data, dict)
        and data.get("require_existing_workspace") is True
    )


def _stderr(data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.buffer.write(data)
        sys.stderr.buffer.flush()


# --- Modal ----------------------------------------------------------------------------------------------


def modal_create_arguments(config: Config, image: Any) -> dict[str, Any]:
    """The keyword arguments of `modal.Sandbox.create` (besides the app) for the profile."""
    return {
        "image": image,
        "name": config["name"],
        "timeout": config["lifetime_seconds"],
        "cpu": config["cpus"],
        "memory": config["memory_mb"],
        "block_network": config["network"] == "none",
        "env": {},
    }


class ModalWorker:
    def __init__(self, process: Any) -> None:
        self.process = process
        self.errors = asyncio.ensure_future(self._stderr())

    async def _stderr(self) -> None:
        async for chunk in self.process.stderr:
            _stderr(chunk)

    async def send(self, line: bytes) -> None:
        self.process.stdin.write(line)
        await self.process.stdin.drain.aio()

    async def close_input(self) -> None:
        self.process.stdin.write_eof()
        await self.process.stdin.drain.aio()

    async def output(self) -> AsyncIterator[bytes]:
        async for chunk in self.process.stdout:
            yield chunk

    async def wait(self) -> int:
        code: int = await self.process.wait.aio()
        await self.errors
        return code


async def run_modal(config: Config) -> int:
    import modal

    snapshot = None
    if config["persistent"] and config["state"] and os.path.exists(config["state"]):
        with open(config["state"], encoding="utf-8") as record:
            snapshot = json.load(record)["image_id"]
    image = modal.Image.from_id(snapshot) if snapshot else modal.Image.from_registry(config["image"])
    app = await modal.App.lookup.aio(MODAL_APP, create_if_missing=True)
    sandbox = await modal.Sandbox.create.aio(
        "sleep", "infinity", app=app, **modal_create_arguments(config, image)
    )
    new = snapshot is None
    process = await sandbox.exec.aio(*worker_argv(config, new), text=False, workdir="/")
    code, reconnect = await relay(ModalWorker(process))
    if code != 0:
        return code
    if config["persistent"] and not (new and reconnect) and config["state"]:
        kept = await sandbox.snapshot_filesystem.aio()
        write_state(config["state"], {"image_id": kept.object_id})
    await sandbox.terminate.aio()
    return 0


def write_state(path: str, record: dict[str, str]) -> None:
    """Record retained state atomically: a crash leaves the old record or the new one."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    partial = f"{path}.{secrets.token_hex(4)}.partial"
    with open(partial, "w", encoding="utf-8") as out:
        json.dump(record, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)


# --- Daytona --------------------------------------------------------------------------------------------


def daytona_create_params(config: Config) -> Any:
    """The `CreateSandboxFromImageParams` of the profile: whole cores, memory rounded up to whole GiB,
    the lifetime as the auto-stop interval in minutes, deleted at stop unless retained."""
    from daytona import CreateSandboxFromImageParams, Resources

    memory = math.ceil(config["memory_mb"] / 1024) if config["memory_mb"] else None
    cpus = math.ceil(config["cpus"]) if config["cpus"] else None
    resources = Resources(cpu=cpus, memory=memory) if cpus or memory else None
    return CreateSandboxFromImageParams(
        image=config["image"],
        name=config["name"],
        resources=resources,
        network_block_all=config["network"] == "none",
        auto_stop_interval=max(1, math.ceil(config["lifetime_seconds"] / 60)),
        auto_delete_interval=-1 if config["persistent"] else 0,
        env_vars={},
        labels={"wuu.persistent": "true" if config["persistent"] else "false"},
    )


class DaytonaWorker:
    """The worker as a session command: its input ends at the marker line (`end`)."""

    def __init__(self, sandbox: Any, session: str, command: str, end: str) -> None:
        self.sandbox, self.session, self.command, self.end = sandbox, session, command, end
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.logs = asyncio.ensure_future(self._logs())

    async def _logs(self) -> None:
        async def out(chunk: str) -> None:
            await self.chunks.put(chunk.encode())

        async def err(chunk: str) -> None:
            _stderr(chunk.encode())

        try:
            await self.sandbox.process.get_session_command_logs_async(self.session, self.command, out, err)
        finally:
            await self.chunks.put(None)

    async def send(self, line: bytes) -> None:
        text = line.decode(errors="replace")
        await self.sandbox.process.send_session_command_input(self.session, self.command, text)

    async def close_input(self) -> None:
        await self.sandbox.process.send_session_command_input(self.session, self.command, self.end + "\n")

    async def output(self) -> AsyncIterator[bytes]:
        while (chunk := await self.chunks.get()) is not None:
            yield chunk

    async def wait(self) -> int:
        await self.logs
        command = await self.sandbox.process.get_session_command(self.session, self.command)
        return int(command.exit_code if command.exit_code is not None else -1)


async def run_daytona(config: Config) -> int:
    from daytona import AsyncDaytona, DaytonaNotFoundError, SessionExecuteRequest

    async with AsyncDaytona() as daytona:
        sandbox = None
        if config["persistent"]:
            with contextlib.suppress(DaytonaNotFoundError):
                sandbox = await daytona.get(config["name"])
        new = sandbox is None
        if sandbox is None:
            sandbox = await daytona.create(daytona_create_params(config), timeout=300)
        else:
            await sandbox.start()
        session, end = f"wuu-{secrets.token_hex(8)}", f"wuu-end-of-input-{secrets.token_hex(16)}"
        # awk passes the frames on, each at once, and ends the worker's input at the marker.
        script = (
            f"awk '$0 == \"{end}\" {{ exit }} {{ print; fflush() }}' | {shlex.join(worker_argv(config, new))}"
        )
        await sandbox.process.create_session(session)
        request = SessionExecuteRequest(command=script, run_async=True, suppress_input_echo=True)
        started = await sandbox.process.execute_session_command(session, request)
        code, reconnect = await relay(DaytonaWorker(sandbox, session, started.cmd_id, end))
        if code != 0:
            return code
        if config["persistent"] and not (new and reconnect):
            await sandbox.stop()
        else:
            await sandbox.delete()
        return 0


# --- Vercel ---------------------------------------------------------------------------------------------


def vercel_create_arguments(config: Config) -> dict[str, Any]:
    """The keyword arguments of `vercel.sandbox.create_sandbox` for the profile."""
    from vercel.sandbox import NetworkPolicy, SandboxResources

    cpus = math.ceil(config["cpus"]) if config["cpus"] else None
    return {
        "name": config["name"],
        "image": config["image"],
        "execution_time_limit": config["lifetime_seconds"],
        "resources": SandboxResources(vcpus=cpus) if cpus else None,
        "persistent": config["persistent"],
        "network_policy": NetworkPolicy.deny_all() if config["network"] == "none" else None,
        "env": {},
    }


class VercelWorker:
    def __init__(self, process: Any) -> None:
        self.process = process
        self.errors = asyncio.ensure_future(self._stderr())

    async def _stderr(self) -> None:
        while text := await self.process.stderr.read(65536):
            _stderr(text.encode())

    async def send(self, line: bytes) -> None:
        await self.process.stdin.send(line)

    async def close_input(self) -> None:
        await self.process.stdin.aclose()

    async def output(self) -> AsyncIterator[bytes]:
        while text := await self.process.stdout.read(65536):
            yield text.encode()

    async def wait(self) -> int:
        code: int = await self.process.wait()
        await self.errors
        return code


async def run_vercel(config: Config) -> int:
    from vercel import sandbox as vercel_sandbox

    existing = None
    if config["persistent"]:
        try:
            existing = await vercel_sandbox.get_sandbox(name=config["name"])
        except vercel_sandbox.SandboxApiError as error:
            if error.status_code != 404:
                raise
    new = existing is None
    sandbox = existing or await vercel_sandbox.create_sandbox(**vercel_create_arguments(config))
    argv = worker_argv(config, new)
    process = await sandbox.create_process(
        argv[0], argv[1:], cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    code, reconnect = await relay(VercelWorker(process))
    if code != 0:
        return code
    if config["persistent"] and not (new and reconnect):
        await sandbox.stop()
    else:
        await sandbox.destroy()
    return 0


# --- the relay ------------------------------------------------------------------------------------------


async def relay(worker: Worker) -> tuple[int, bool]:
    """Relay this process's stdio to the worker until both directions end; (its exit status, whether the
    host's last initialize was a reconnect)."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=MAX_FRAME_BYTES, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin, loop=loop), sys.stdin.buffer)
    reconnect = False

    async def to_worker() -> None:
        nonlocal reconnect
        try:
            while line := await stdin.readline():
                if b"initialize" in line:
                    reconnect = is_reconnect(line)
                await worker.send(line)
        except ValueError:
            pass  # a line over the frame limit: no worker may accept it, and no frame follows it
        finally:
            await worker.close_input()

    async def to_host() -> None:
        out = sys.stdout.buffer
        async for chunk in worker.output():
            out.write(chunk)
            out.flush()

    # The host's EOF closes the worker's input, and the worker's output then ends; a worker that ends first
    # ends the relay too. A provider's failure to pass input on ends it at once.
    sending, receiving = asyncio.ensure_future(to_worker()), asyncio.ensure_future(to_host())
    await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
    if sending.done() and sending.exception() is not None:
        receiving.cancel()
        raise sending.exception()  # type: ignore[misc]
    await receiving
    if not sending.done():
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
    return await worker.wait(), reconnect


RUNS = {"modal": run_modal, "daytona": run_daytona, "vercel": run_vercel}


def main(argv: list[str]) -> int:
    config: Config = json.loads(argv[0])
    backend = config["backend"]
    try:
        return asyncio.run(RUNS[backend](config))
    except ModuleNotFoundError as missing:
        if (missing.name or "").partition(".")[0] not in (backend, "vercel"):
            raise
        print(
            f"wuu {backend}: the {SDKS[backend]} SDK is not installed for {sys.executable}: "
            f"pip install {SDKS[backend]!r}, or name an interpreter that has it in the profile's `python`",
            file=sys.stderr,
        )
        return 2
    except Exception as error:  # the provider's refusal: no credentials, a quota, an image it cannot pull
        print(f"wuu {backend}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
