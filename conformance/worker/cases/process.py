"""process/*: the start record, list and get, stopping a whole tree, timeouts, events and operation ids.

The helpers here (starting a process in the adapter's command mode, checked reads, waiting for a
process to end, collecting events, heartbeat files) are shared with the read and lifetime cases.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import ProcessEvent

from ...outcomes import CaseFailed
from ..session import SESSION_ID, Session, code_of
from ..suite import WORKER

TERMINAL_TYPES = {"exited", "stopped", "failed"}
# The causes that may go with each event type (ProcessEventType and ProcessEventCause in the spec).
CAUSES = {
    "started": {"start"},
    "exited": {"exit", "signal"},
    "stopped": {"stop_request", "timeout", "shutdown"},
    "failed": {"error"},
}
HEARTBEAT_PERIOD = 0.05
# How long a heartbeat file must stay unchanged to count as dead: ten heartbeat periods.
QUIET_WINDOW = 10 * HEARTBEAT_PERIOD


# --- helpers shared with read.py and lifetime.py ------------------------------------------------------


async def begin(s: Session, capabilities: Sequence[str] | None = None) -> str:
    """Initialize, skip unless the adapter serves process/start, and return its command mode."""
    if capabilities is None:
        await s.initialize()
    else:
        await s.initialize(capabilities=list(capabilities))
    s.require_method("process/start")
    return await s.command_mode()


async def start(s: Session, argv: Sequence[str], **extra: Any) -> dict[str, Any]:
    """process/start of `argv` in the adapter's command mode; the record it answers."""
    mode = await s.command_mode()
    record = await s.ok("process/start", {"argv": list(argv), "permission_mode": mode, **extra})
    s.expect(record["status"] != "failed", f"process/start of {list(argv)} failed: {record}")
    return record


def shell(script: str) -> list[str]:
    """The argv that runs a POSIX shell script (process/start itself involves no shell)."""
    return ["sh", "-c", script]


async def get(s: Session, process_id: str) -> dict[str, Any]:
    return await s.ok("process/get", {"id": process_id})


def output_of(s: Session, result: dict[str, Any]) -> bytes:
    """The bytes of a process/read result, after checking Output is canonical base64 spanning the offsets."""
    text = result["Output"]
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CaseFailed(f"Output is not valid base64: {text[:80]!r}") from None
    s.expect(
        base64.b64encode(data).decode("ascii") == text,
        f"Output is not standard padded base64 (Go's encoding of []byte): {text[:80]!r}",
    )
    s.expect(
        result["EndOffset"] - result["StartOffset"] == len(data),
        f"Output holds {len(data)} bytes but spans StartOffset {result['StartOffset']} to "
        f"EndOffset {result['EndOffset']}",
    )
    s.expect(
        not data or result["EndOffset"] <= result["TotalBytes"],
        f"EndOffset {result['EndOffset']} is past TotalBytes {result['TotalBytes']}",
    )
    return data


async def read(s: Session, process_id: str, **params: Any) -> tuple[dict[str, Any], bytes]:
    """One checked process/read (Go-cased params): the result and its decoded output."""
    result = await s.ok("process/read", {"Process": process_id, **params})
    return result, output_of(s, result)


async def read_until(s: Session, process_id: str, wanted: int, offset: int = 0) -> bytes:
    """The stream from `offset` until it holds `wanted` bytes, long-polling (Wait) for the rest.

    Fails if they do not all arrive within the session timeout.
    """
    collected = b""
    position = offset
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.timeout
    while len(collected) < wanted:
        s.expect(
            loop.time() < deadline,
            f"only {len(collected)} of {wanted} bytes of output arrived within {s.timeout:g} s",
        )
        result, data = await read(s, process_id, OffsetBytes=position, Wait=1_000_000_000)
        s.expect(
            result["StartOffset"] == position and not result["Truncated"],
            f"a read at {position} answered from StartOffset {result['StartOffset']} "
            f"(Truncated {result['Truncated']})",
        )
        collected += data
        position = result["EndOffset"]
        if not data and result["Process"]["status"] != "running":
            # An ended process answers at once; its last bytes may still be on their way to the adapter.
            await asyncio.sleep(0.02)
    return collected


async def wait_ended(s: Session, process_id: str) -> dict[str, Any]:
    """Wait until the process's record is no longer running; return that record."""
    record: dict[str, Any] = {}

    async def ended() -> bool:
        record.update(await get(s, process_id))
        return bool(record["status"] != "running")

    await s.until(ended, f"process {process_id} to end")
    return record


class Events:
    """Every process/event received during a case (s.events() hands each one out only once)."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self.seen: list[ProcessEvent] = []

    def of(self, process_id: str) -> list[ProcessEvent]:
        self.seen.extend(self.s.events())
        return [event for event in self.seen if event.process.id == process_id]

    def terminal(self, process_id: str) -> list[ProcessEvent]:
        return [event for event in self.of(process_id) if event.type.value in TERMINAL_TYPES]

    async def wait_terminal(self, process_id: str) -> ProcessEvent:
        await self.s.until(lambda: self.terminal(process_id), f"the terminal event of process {process_id}")
        return self.terminal(process_id)[0]


def raw_events(s: Session) -> list[dict[str, Any]]:
    """Every process/event notification frame received so far, parsed but not validated."""
    found = []
    for frame in s.received():
        try:
            parsed = json.loads(frame)
        except ValueError:
            continue
        if isinstance(parsed, dict) and parsed.get("method") == "process/event":
            found.append(parsed)
    return found


def heartbeat_script(path: str) -> str:
    """A shell script whose grandchild appends a byte to `path` every HEARTBEAT_PERIOD seconds."""
    beat = f"while :; do printf x >> {path}; sleep {HEARTBEAT_PERIOD}; done"
    # sh (the process) -> sh (child) -> sh running the loop (grandchild); each parent waits.
    return f"sh -c \"sh -c '{beat}' & wait\" & wait"


async def file_size(s: Session, path: str) -> int:
    """The size of a workspace file as read_file reports it (0 while it does not exist)."""
    reply = await s.execute("read_file", path=path, max_bytes=1)
    if code_of(reply) == "unsupported_tool":
        s.skip("the adapter does not provide read_file, which observes the heartbeat file")
    if code_of(reply) == "not_found":
        return 0
    s.expect("data" in reply, f"read_file {path} failed: {reply.get('error')}")
    metadata = reply["data"].get("metadata") or {}
    s.expect(isinstance(metadata.get("size"), int), f"read_file {path} reports no size: {reply['data']}")
    return int(metadata["size"])


async def expect_growing(s: Session, size: Callable[[], Any], what: str) -> None:
    """Wait until the heartbeat has beaten at least twice (its size grows past a first positive size)."""
    first = 0

    async def grew() -> bool:
        nonlocal first
        now = await size()
        if first == 0:
            first = now
            return False
        return bool(now > first)

    await s.until(grew, f"{what} to grow")


async def expect_quiet(s: Session, size: Callable[[], Any], what: str) -> None:
    """Fail if the heartbeat grows at all during QUIET_WINDOW (ten of its periods).

    This is the one fixed wait of these cases: a dead writer can only be shown by its silence.
    """
    before = await size()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + QUIET_WINDOW
    while loop.time() < deadline:
        await asyncio.sleep(HEARTBEAT_PERIOD)
        now = await size()
        s.expect(now == before, f"{what} still grows ({before} -> {now} bytes): part of the tree is alive")


def timestamp(text: str) -> datetime:
    """An RFC 3339 time of a record (fromisoformat keeps microseconds of a nanosecond fraction)."""
    return datetime.fromisoformat(text.upper())


def check_running_record(s: Session, record: dict[str, Any], argv: Sequence[str]) -> None:
    s.expect(record["status"] == "running", f"a new process's status is {record['status']}, not running")
    s.expect(
        record["root_thread_id"] == SESSION_ID,
        f"root_thread_id is {record['root_thread_id']!r}, not the binding's session {SESSION_ID!r}",
    )
    s.expect(record["argv"] == list(argv), f"argv is {record['argv']}, not {list(argv)}")
    for field in ("exit_code", "signal", "ended_at", "duration_ns"):
        s.expect(record[field] is None, f"a running process has {field} {record[field]!r}, not null")


# --- cases ----------------------------------------------------------------------------------------


@WORKER.case("process.start-record")
async def start_record(s: Session) -> None:
    """process/start answers a running record bound to the session, with the root as default cwd.

    Two starts get distinct ids, and a process that exits by itself ends `exited` with its exit code,
    an end time and a duration in nanoseconds.
    """
    await begin(s)
    argv = shell("sleep 30")
    first = await start(s, argv)
    check_running_record(s, first, argv)
    s.expect(
        first["cwd"].startswith("/") and first["cwd"].rstrip("/") == str(s.root).rstrip("/"),
        f"cwd is {first['cwd']!r}; the default is the root {str(s.root)!r}",
    )
    s.expect(first["output_bytes"] == 0, f"a silent new process has output_bytes {first['output_bytes']}")
    s.expect("operation_id" not in first, f"a start without operation_id answers one: {first}")

    argv = shell("printf 12345; exit 3")
    second = await start(s, argv)
    s.expect(second["id"] != first["id"], f"two processes share the id {first['id']!r}")
    ended = await wait_ended(s, second["id"])
    s.expect(ended["status"] == "exited", f"a process that exited by itself has status {ended['status']}")
    s.expect(ended["exit_code"] == 3, f"exit_code is {ended['exit_code']}, not 3")
    s.expect(ended["signal"] is None, f"signal is {ended['signal']!r} for a plain exit")
    s.expect(ended["ended_at"] is not None, "an ended process has ended_at null")
    s.expect(
        timestamp(ended["ended_at"]) >= timestamp(ended["started_at"]),
        f"ended_at {ended['ended_at']} precedes started_at {ended['started_at']}",
    )
    duration = ended["duration_ns"]
    s.expect(isinstance(duration, int) and duration > 0, f"an ended process has duration_ns {duration!r}")
    # Whatever the machine, starting sh takes more than a microsecond and less than a minute.
    s.expect(
        1_000 <= duration < 60_000_000_000,
        f"duration_ns {duration} is not a plausible nanosecond count for a short shell command",
    )
    await read_until(s, second["id"], 5)
    ended = await get(s, second["id"])
    s.expect(ended["output_bytes"] == 5, f"output_bytes is {ended['output_bytes']} after `printf 12345`")


@WORKER.case("process.list-get")
async def list_get(s: Session) -> None:
    """process/list answers the session's records in start order, running and ended; process/get one.

    An unknown id gets not_found from get, read and stop.
    """
    await begin(s)
    await s.ok("process/list", {})
    quick = await start(s, shell("exit 0"))
    slow = await start(s, shell("sleep 30"))
    await wait_ended(s, quick["id"])
    listed = (await s.ok("process/list", {}))["processes"]
    ids = [record["id"] for record in listed]
    s.expect(ids == [quick["id"], slow["id"]], f"process/list answers ids {ids}, not both in start order")
    for record in listed:
        s.expect(record["root_thread_id"] == SESSION_ID, f"a listed record has root_thread_id {record}")
    s.expect(listed[0]["status"] == "exited", f"the ended process is listed as {listed[0]['status']}")
    s.expect(listed[1]["status"] == "running", f"the running process is listed as {listed[1]['status']}")
    for record in (quick, slow):
        got = await get(s, record["id"])
        s.expect(got["id"] == record["id"], f"process/get {record['id']} answers the record of {got['id']}")
        s.expect(got["argv"] == record["argv"], f"process/get {record['id']} answers argv {got['argv']}")
        s.expect(got["started_at"] == record["started_at"], "process/get changes started_at")
    await s.error("process/get", {"id": "no-such-process"}, "not_found")
    await s.error("process/read", {"Process": "no-such-process"}, "not_found")
    await s.error("process/stop", {"id": "no-such-process"}, "not_found")


@WORKER.case("process.stop-tree")
async def stop_tree(s: Session) -> None:
    """process/stop ends the whole tree: a grandchild's heartbeat file stops growing once stop answers.

    The reply is the ended record (status stopped); stopping it again returns it unchanged; a tree that
    ignores TERM is killed after grace_ms.
    """
    await begin(s)
    tree = await start(s, shell(heartbeat_script("heartbeat")))

    async def size() -> int:
        return await file_size(s, "heartbeat")

    await expect_growing(s, size, "the grandchild's heartbeat file")
    stopped = await s.ok("process/stop", {"id": tree["id"], "signal": "TERM", "grace_ms": 2000})
    s.expect(stopped["status"] == "stopped", f"process/stop answers status {stopped['status']}")
    s.expect(stopped["ended_at"] is not None, "process/stop answers a record with ended_at null")
    s.expect(stopped["duration_ns"] is not None, "process/stop answers a record with duration_ns null")
    await expect_quiet(s, size, "the grandchild's heartbeat file")
    again = await s.ok("process/stop", {"id": tree["id"]})
    s.expect(again == stopped, f"stopping an ended process changed its record: {stopped} -> {again}")

    # sleep inherits the ignored TERM, so only the KILL after the grace ends this tree.
    stubborn = await start(s, shell("trap '' TERM; while :; do sleep 0.05; done"))
    ended = await s.ok("process/stop", {"id": stubborn["id"], "signal": "TERM", "grace_ms": 200})
    s.expect(ended["status"] == "stopped", f"a TERM-ignoring tree ends {ended['status']} after its grace")
    killed = await start(s, shell("sleep 30"))
    ended = await s.ok("process/stop", {"id": killed["id"], "signal": "KILL"})
    s.expect(ended["status"] == "stopped", f"a KILL stop answers status {ended['status']}")
    s.expect(ended["exit_code"] is None, f"a killed process has exit_code {ended['exit_code']}")


@WORKER.case("process.timeout")
async def timeout(s: Session) -> None:
    """A process past timeout_ms is stopped: status stopped, one `stopped` event with cause timeout.

    Its duration_ns is at least the timeout, in nanoseconds.
    """
    await begin(s)
    events = Events(s)
    record = await start(s, shell("sleep 30"), timeout_ms=300)
    terminal = await events.wait_terminal(record["id"])
    s.expect(
        terminal.type.value == "stopped" and terminal.cause.value == "timeout",
        f"the terminal event is {terminal.type.value}/{terminal.cause.value}, not stopped/timeout",
    )
    ended = await wait_ended(s, record["id"])
    s.expect(ended["status"] == "stopped", f"a timed-out process has status {ended['status']}")
    duration = ended["duration_ns"]
    s.expect(
        isinstance(duration, int) and 300_000_000 <= duration < 60_000_000_000,
        f"duration_ns {duration} of a process stopped by timeout_ms 300 is not >= 3e8 ns",
    )
    s.expect(len(events.terminal(record["id"])) == 1, "the timed-out process has several terminal events")


@WORKER.case("process.events")
async def events(s: Session) -> None:
    """Each process gets `started` first and exactly one terminal event, in Go casing on the wire.

    A process that exits gets `exited`/`exit`; one stopped by request gets `stopped`/`stop_request`; the
    record in each event has the status that matches.
    """
    await begin(s)
    seen = Events(s)
    quick = await start(s, shell("printf done"))
    slow = await start(s, shell("sleep 30"))
    await seen.wait_terminal(quick["id"])
    await s.ok("process/stop", {"id": slow["id"]})
    await seen.wait_terminal(slow["id"])
    await s.ok("process/list", {})  # a round trip, so that a duplicate terminal event would be here

    for record, expected in ((quick, ("exited", "exit")), (slow, ("stopped", "stop_request"))):
        found = seen.of(record["id"])
        kinds = [(event.type.value, event.cause.value) for event in found]
        s.expect(
            kinds[:1] == [("started", "start")], f"process {record['id']}'s events {kinds} start otherwise"
        )
        terminal = [kind for kind in kinds if kind[0] in TERMINAL_TYPES]
        s.expect(len(terminal) == 1, f"process {record['id']} has {len(terminal)} terminal events: {kinds}")
        s.expect(
            kinds[-1] == terminal[0], f"process {record['id']} has events after its terminal one: {kinds}"
        )
        s.expect(terminal[0] == expected, f"process {record['id']} ended with {terminal[0]}, not {expected}")
        s.expect(found[0].process.status.value == "running", "the started event's record is not running")
        s.expect(
            found[-1].process.status.value == expected[0],
            f"the {expected[0]} event carries a record with status {found[-1].process.status.value}",
        )
        for event in found:
            s.expect(
                event.cause.value in CAUSES[event.type.value],
                f"event {event.type.value} has cause {event.cause.value}",
            )

    frames = raw_events(s)
    s.expect(len(frames) >= 4, f"only {len(frames)} process/event frames arrived for two processes")
    for frame in frames:
        s.expect("id" not in frame, f"a process/event notification carries an id: {frame}")
        data: dict[str, Any] = frame.get("data") or {}
        s.expect(
            isinstance(data, dict) and set(data) == {"Type", "Cause", "Process"},
            f"a process/event is not Go-cased {{Type, Cause, Process}}: {data}",
        )
        s.expect(
            "root_thread_id" in data["Process"] and "status" in data["Process"],
            f"the record in a process/event is not snake_case: {data['Process']}",
        )


@WORKER.case("process.operation-id")
async def operation_id(s: Session) -> None:
    """With process.start.v1 granted, start replies and every process/list record keep the operation_id."""
    await begin(s, capabilities=["process.start.v1"])
    s.require_capability("process.start.v1")
    first = await start(s, shell("exit 0"), operation_id="op-first")
    second = await start(s, shell("sleep 30"), operation_id="op/second:2")
    plain = await start(s, shell("exit 0"))
    s.expect(first.get("operation_id") == "op-first", f"the start reply lost operation_id: {first}")
    s.expect(second.get("operation_id") == "op/second:2", f"the start reply lost operation_id: {second}")
    await wait_ended(s, first["id"])
    listed = {record["id"]: record for record in (await s.ok("process/list", {}))["processes"]}
    for record in (first, second):
        s.expect(record["id"] in listed, f"process/list lacks process {record['id']}")
        s.expect(
            listed[record["id"]].get("operation_id") == record["operation_id"],
            f"process/list changed the operation_id of {record['id']}: {listed[record['id']]}",
        )
    s.expect(
        "operation_id" not in listed.get(plain["id"], {}),
        f"a process started without operation_id is listed with one: {listed.get(plain['id'])}",
    )
