"""The sizes of a run: the full one of `make bench` and the quick smoke run of the tests, and the units."""

from __future__ import annotations

from dataclasses import dataclass

from wuu.generated.catalog import WORKER_EXPORT_READ_MAX_BYTES, WORKER_PROCESS_READ_MAX_BYTES

MB = 1_000_000  # throughputs are in MB/s (10^6 bytes)
MIB = 1 << 20  # memory and sizes are in MiB
SECOND_NS = 1_000_000_000
IN_FLIGHT = 64
EXPORT_CHUNK = WORKER_EXPORT_READ_MAX_BYTES
STREAM_READ = WORKER_PROCESS_READ_MAX_BYTES
STREAM_WAIT_NS = SECOND_NS


@dataclass(frozen=True)
class Config:
    """How much each figure measures."""

    rounds: int
    rtt_requests: int  # sequential requests per side and round
    rtt_blocks: int  # the round's requests alternate between the sides in this many blocks
    pipelined_requests: int  # per side and round
    export_bytes: int
    stream_bytes: int
    cold_starts: int  # per side, over all rounds
    spawns: int  # per side and mode, over all rounds
    warmup: int  # requests before the timed ones, per side and round
    userhost_pipelined: int  # requests of the 16 user-host clients, per side and round
    personal_sends: int  # durable sends (and raw commits) per side and round
    search_messages: int  # the size of the searched conversation
    searches: int  # timed searches per kind, side and round


FULL = Config(
    rounds=5,
    rtt_requests=2000,
    rtt_blocks=4,
    pipelined_requests=15_000,
    export_bytes=64 * MIB,
    stream_bytes=64 * MIB,
    cold_starts=15,
    spawns=45,
    warmup=300,
    userhost_pipelined=20_000,
    personal_sends=2_000,
    search_messages=1_000_000,
    searches=200,
)
QUICK = Config(
    rounds=1,
    rtt_requests=50,
    rtt_blocks=1,
    pipelined_requests=4 * IN_FLIGHT,
    export_bytes=2 * EXPORT_CHUNK,
    stream_bytes=8 * MIB,
    cold_starts=2,
    spawns=3,
    warmup=20,
    userhost_pipelined=4 * IN_FLIGHT,
    personal_sends=50,
    search_messages=5_000,
    searches=10,
)
