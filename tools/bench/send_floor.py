"""The floors under the durable-send figures: a bare NDJSON server on a Unix socket that does, per request,
only what any host of the Personal store must do, serving until SIGTERM:

    python tools/bench/send_floor.py row|admission STORE SOCKET

Each request line is parsed and handled as a task of its own (a client's requests may overlap), its write
goes through the store's `Database` (its writer process, group commit, WAL with `synchronous=FULL`), and the
reply is written once the write is durable. `row` commits one 200-byte row per request, the raw baseline's
write; `admission` commits the store's own admission of the request's user input (`admission.admit`: the
message, its search index entry, the receipt and their indexes). There is no session state, no params model
and no agent: what a host adds above the `admission` floor is its own cost. It runs on the event loop
`wuu-userhost serve` runs on.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import signal
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import floor_writes  # beside this script
import orjson

from wuu.host.userhost.event_loop import run
from wuu.host.userhost.personal.plugin import PLUGIN_ID
from wuu.host.userhost.personal.provider import Submission
from wuu.host.userhost.personal.sqlite import sessions
from wuu.host.userhost.personal.sqlite.database import Database
from wuu.host.userhost.services import Caller

CALLER = Caller("unix", None)


def submission(main: str, user_input: dict[str, Any]) -> Submission:
    """The submission a host makes of a request's user input."""
    text = user_input["text"]
    return Submission(
        session_id=main,
        plugin_id=PLUGIN_ID,
        client_input_id=user_input["client_input_id"],
        request_id=user_input["request_id"],
        text=text,
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
        attachments=(),
        binding_digest=hashlib.sha256(f"{user_input['request_id']}\n{text}".encode()).hexdigest(),
        admitted_by=CALLER,
    )


async def main(mode: str, store: Path, socket: Path) -> None:
    def setup(connection: sqlite3.Connection) -> None:
        # `open` has already given the file the store's schema.
        connection.execute("CREATE TABLE receipts (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
        sessions.create_or_check_space(connection, store, "bench", "personal", datetime.now(UTC))

    database = await Database.open(store, setup)
    main_session = await database.read(sessions.main_session_id)
    numbers = itertools.count()

    async def answer(writer: asyncio.StreamWriter, request: dict[str, Any]) -> None:
        if request.get("method") == "initialize":
            result: dict[str, Any] = {}
        elif mode == "row":
            result = {"result": await database.write(floor_writes.row, next(numbers))}
        else:
            user_input = request["params"]["user_input"]
            now = datetime.now(UTC)
            result = {
                "result": await database.write(
                    floor_writes.admit, main_session, submission(main_session, user_input), now
                )
            }
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        writer.write(orjson.dumps(reply, option=orjson.OPT_APPEND_NEWLINE))

    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            task = asyncio.create_task(answer(writer, orjson.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_unix_server(serve, socket, limit=1 << 24)
    await stop.wait()
    server.close()
    await database.close()


if __name__ == "__main__":
    run(lambda: main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
