"""The Personal plugin's bundled SQLite store (`host/userhost/personal/sqlite/`): where its file lives and
how it is set up (WAL, `user_version`), the versioned migrations of an older store, the refusal of a store
written by a newer build or bound to another space, the one main session (kept across reconnect and restart,
never recreated once gone), and group commit: many concurrent writes committed together, each acknowledged
only once durable, a failing write undoing no other write of its group.

The group-commit tests read which writes shared a transaction from the store's own record of the
transactions its writer process committed (`Database.groups`).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from tests.helpers import until
from tests.host.userhost.personal.conftest import (
    Connect,
    Inputs,
    Space,
    StartSpace,
    attachment,
    call,
    error,
    main_session,
    result,
    send,
    serve_command,
    silent,
)
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import (
    SqliteSessionDomain,
    StoreError,
    StoreVersionError,
    personal,
)
from wuu.host.userhost.personal.page_tokens import KEY_FILE
from wuu.host.userhost.personal.sqlite import history, schema, search_index

SPACE_ROOT = ("user-spaces", "local", "personal")
LEGACY_MAIN = "ses_main_legacy0001"


def store_path(home: Path) -> Path:
    return home.joinpath(*SPACE_ROOT, "state", "personal.sqlite")


def rows(path: Path, sql: str, *arguments: Any) -> list[tuple[Any, ...]]:
    """Rows of a store's file, read on a connection of the test's own (closed after the read)."""
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql, arguments).fetchall()
    finally:
        connection.close()


def write_by_hand(path: Path, *statements: str) -> None:
    """Run statements on the file as a program other than the host would (then close the connection)."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            connection.execute(statement)
    finally:
        connection.close()


async def start_host(home: Path, **options: Any) -> UserHost:
    """A Personal host on `home` that the caller closes."""
    return await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=home,
        composition_profile="personal",
        compose=[personal(**options)],
    )


async def make_store(home: Path) -> Path:
    """A store made by this build: a host started once on `home` and closed."""
    host = await start_host(home)
    await host.close()
    return store_path(home)


def database_of(space: Space) -> Any:
    return cast(SqliteSessionDomain, space.plugin.store).database


def identity(receipt: dict[str, Any]) -> dict[str, Any]:
    """What admission fixed in a receipt (every field but the read stage and the revision it bumps)."""
    return {key: value for key, value in receipt.items() if key not in ("revision", "read_at")}


# --- the file --------------------------------------------------------------------------------------


async def test_the_store_is_one_wal_file_in_the_spaces_state_folder(
    space: Space, client: UserHostClient, inputs: Inputs, home: Path
) -> None:
    sent = result(await send(client, space.main, inputs("Water the ficus", [attachment(b"every sunday")])))
    await space.idle()
    assert space.database == store_path(home)
    assert rows(space.database, "PRAGMA journal_mode") == [("wal",)]
    assert rows(space.database, "PRAGMA user_version") == [(schema.VERSION,)]
    (saved,) = sent["receipt"]["attachments"]
    await space.host.close()

    root = home.joinpath(*SPACE_ROOT)
    outside = [
        path
        for path in home.rglob("*")
        if path != root and root not in path.parents and path not in root.parents
    ]
    assert outside == []
    state_files = sorted(path.name for path in (root / "state").iterdir())
    assert state_files == [KEY_FILE, "personal.sqlite"]  # the store, and the key of its page tokens
    stored = root / "files" / "attachments" / saved["attachment_id"]
    assert stored.read_bytes() == b"every sunday"


# --- migrations ------------------------------------------------------------------------------------


def build_version_1_store(path: Path) -> None:
    """A store as version 1 of the schema holds it: the space, its main session and three messages (the
    last a legacy one with no timestamp), each indexed for search, written by hand."""
    path.parent.mkdir(parents=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        assert schema.migrate(connection, 1) == 0
        assert connection.execute("PRAGMA user_version").fetchone() == (1,)
        connection.execute(
            "INSERT INTO space VALUES (1, 'local', 'personal', ?, '2025-06-01T08:00:00.000000Z')",
            (LEGACY_MAIN,),
        )
        connection.execute(
            "INSERT INTO sessions VALUES (?, 'main', '2025-06-01T08:00:00.000000Z')", (LEGACY_MAIN,)
        )
        messages = [
            (
                1,
                "user",
                "Book a table for the anniversary dinner",
                "2025-06-01T08:00:01.000000Z",
                1748764801000000,
            ),
            (
                2,
                "assistant",
                "Booked the anniversary table at eight",
                "2025-06-01T08:00:02.000000Z",
                1748764802000000,
            ),
            (3, "user", "A legacy note about the garden", None, None),
        ]
        for seq, role, text, created_at, created_us in messages:
            row_id = connection.execute(
                "INSERT INTO messages (session_id, seq, role, text, created_at, created_us) VALUES (?, ?, ?, ?, ?, ?)",
                (LEGACY_MAIN, seq, role, text, created_at, created_us),
            ).lastrowid
            connection.execute(
                "INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (row_id, text.casefold())
            )
    finally:
        connection.close()


def legacy_message(seq: int, role: str, text: str, created_at: str | None) -> dict[str, Any]:
    return {
        "message_seq": seq,
        "role": role,
        "text": text,
        "created_at": created_at,
        "reaction_eligible": role == "assistant",
        "reactions": {"revision": 0},
        "attachments": [],
    }


async def test_a_version_1_store_is_migrated_with_its_data_intact(
    home: Path, start_space: StartSpace, run_dir: Path, inputs: Inputs
) -> None:
    path = store_path(home)
    build_version_1_store(path)
    space = await start_space()
    assert rows(path, "PRAGMA user_version") == [(schema.VERSION,)]
    assert rows(path, "PRAGMA journal_mode") == [("wal",)]
    assert space.main == LEGACY_MAIN
    assert rows(path, "SELECT session_id, kind FROM sessions") == [(LEGACY_MAIN, "main")]

    server = await UnixServer.start(space.host, run_dir / "personal.sock")
    client = await UserHostClient.connect_unix(server.path)
    try:
        await client.initialize()
        assert await main_session(client) == LEGACY_MAIN
        page = result(await call(client, "agents.history.read", {"session_id": LEGACY_MAIN}))
        assert page == {
            "messages": [
                legacy_message(3, "user", "A legacy note about the garden", None),
                legacy_message(
                    2, "assistant", "Booked the anniversary table at eight", "2025-06-01T08:00:02.000000Z"
                ),
                legacy_message(
                    1, "user", "Book a table for the anniversary dinner", "2025-06-01T08:00:01.000000Z"
                ),
            ],
            "next_before_seq": None,
        }
        found = result(
            await call(client, "agents.history.search", {"session_id": LEGACY_MAIN, "query": "ANNIVERSARY"})
        )
        assert [m["message_seq"] for m in found["messages"]] == [2, 1]
        garden = result(
            await call(client, "agents.history.search", {"session_id": LEGACY_MAIN, "query": "garden"})
        )
        assert [(m["message_seq"], m["created_at"]) for m in garden["messages"]] == [(3, None)]

        # The migrated store takes new writes where the old history ends.
        sent = result(await send(client, LEGACY_MAIN, inputs("Remind me about the anniversary gift")))
        assert sent["receipt"]["history_seq"] == 4
        reacted = result(
            await call(
                client,
                "agents.react",
                {
                    "session_id": LEGACY_MAIN,
                    "message_seq": 2,
                    "emoji": "🥂",
                    "expected_revision": 0,
                    "request_id": "legacy-react-1",
                },
            )
        )
        assert reacted["reactions"] == {"owner": "🥂", "revision": 1}
        await space.idle()
        found = result(
            await call(client, "agents.history.search", {"session_id": LEGACY_MAIN, "query": "anniversary"})
        )
        assert [m["message_seq"] for m in found["messages"]] == [5, 4, 2, 1]
    finally:
        await client.close()
        await server.close()


# --- stores this build must not serve -----------------------------------------------------------------


async def test_a_store_of_a_newer_build_is_refused_untouched(home: Path) -> None:
    path = await make_store(home)
    write_by_hand(path, f"PRAGMA user_version = {schema.VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(StoreVersionError) as refused:
        await start_host(home)
    message = str(refused.value)
    assert re.search(rf"\b{schema.VERSION + 1}\b", message) and re.search(
        rf"\b{schema.VERSION}\b", message
    ), message
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [KEY_FILE, "personal.sqlite"]


async def test_a_newer_store_in_rollback_journal_mode_is_refused_untouched(home: Path) -> None:
    """A store a newer build wrote without WAL: refusing it must not convert it to WAL first."""
    path = store_path(home)
    path.parent.mkdir(parents=True)
    write_by_hand(path, "CREATE TABLE future (id INTEGER PRIMARY KEY)", "PRAGMA user_version = 99")
    assert rows(path, "PRAGMA journal_mode") == [("delete",)]
    before = path.read_bytes()
    with pytest.raises(StoreVersionError, match=r"\b99\b"):
        await start_host(home)
    assert path.read_bytes() == before
    assert rows(path, "PRAGMA journal_mode") == [("delete",)]


async def test_the_cli_refuses_a_newer_store_with_status_2(home: Path, run_dir: Path) -> None:
    path = await make_store(home)
    newer = schema.VERSION + 7
    write_by_hand(path, f"PRAGMA user_version = {newer}")
    before = path.read_bytes()
    socket = run_dir / "refused.sock"
    done = await asyncio.to_thread(
        subprocess.run, serve_command(home, socket), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("wuu-userhost:")]
    assert re.search(rf"\b{newer}\b", line) and re.search(rf"\b{schema.VERSION}\b", line), line
    assert path.read_bytes() == before
    assert not socket.exists()


@pytest.mark.parametrize(("column", "value"), [("user_space_id", "other"), ("product_domain", "coding")])
async def test_a_store_of_another_space_or_domain_is_refused(home: Path, column: str, value: str) -> None:
    path = await make_store(home)
    write_by_hand(path, f"UPDATE space SET {column} = '{value}'")
    kept = rows(path, "SELECT * FROM space")
    sessions = rows(path, "SELECT * FROM sessions")
    with pytest.raises(StoreError, match=repr(value)):
        await start_host(home)
    assert rows(path, "SELECT * FROM space") == kept
    assert rows(path, "SELECT * FROM sessions") == sessions


async def test_the_cli_refuses_a_store_of_another_space_with_status_2(home: Path, run_dir: Path) -> None:
    path = await make_store(home)
    write_by_hand(path, "UPDATE space SET user_space_id = 'someone-else'")
    socket = run_dir / "foreign.sock"
    done = await asyncio.to_thread(
        subprocess.run, serve_command(home, socket), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2, done.stderr
    assert "someone-else" in done.stderr
    assert not socket.exists()


# --- the main session --------------------------------------------------------------------------------


async def test_the_main_session_is_created_with_the_space_and_kept(
    start_space: StartSpace, run_dir: Path, home: Path
) -> None:
    space = await start_space()
    path = store_path(home)
    (main,) = rows(path, "SELECT main_session_id FROM space")[0]
    assert rows(path, "SELECT session_id, kind FROM sessions") == [(main, "main")]
    server = await UnixServer.start(space.host, run_dir / "a.sock")
    try:
        for _ in range(2):  # reconnect
            client = await UserHostClient.connect_unix(server.path)
            await client.initialize()
            assert await main_session(client) == main
            await client.close()
    finally:
        await server.close()
    await space.host.close()

    again = await start_space()  # restart on the same home
    assert again.main == main
    server = await UnixServer.start(again.host, run_dir / "b.sock")
    client = await UserHostClient.connect_unix(server.path)
    try:
        await client.initialize()
        assert await main_session(client) == main
    finally:
        await client.close()
        await server.close()
    assert rows(path, "SELECT session_id, kind FROM sessions") == [(main, "main")]


async def assert_main_missing(client: UserHostClient, main: str, inputs: Inputs) -> None:
    error(await call(client, "agents.main_session", {}), UserHostErrorCode.MAIN_SESSION_MISSING)
    error(await send(client, main, inputs("is anyone there?")), UserHostErrorCode.MAIN_SESSION_MISSING)
    error(
        await call(client, "agents.history.read", {"session_id": main}),
        UserHostErrorCode.MAIN_SESSION_MISSING,
    )


async def test_a_missing_main_session_is_reported_and_never_recreated(
    start_space: StartSpace, run_dir: Path, home: Path, inputs: Inputs
) -> None:
    space = await start_space(agent=silent())
    main = space.main
    path = store_path(home)
    write_by_hand(path, f"DELETE FROM sessions WHERE session_id = '{main}'")
    server = await UnixServer.start(space.host, run_dir / "a.sock")
    client = await UserHostClient.connect_unix(server.path)
    try:
        await client.initialize()
        await assert_main_missing(client, main, inputs)
    finally:
        await client.close()
        await server.close()
    assert rows(path, "SELECT * FROM sessions") == []
    assert rows(path, "SELECT count(*) FROM input_receipts") == [(0,)]
    await space.host.close()

    host = await start_host(home)  # a restart does not rebuild it either
    server = await UnixServer.start(host, run_dir / "b.sock")
    client = await UserHostClient.connect_unix(server.path)
    try:
        await client.initialize()
        await assert_main_missing(client, main, inputs)
    finally:
        await client.close()
        await server.close()
        await host.close()
    assert rows(path, "SELECT * FROM sessions") == []
    assert rows(path, "SELECT main_session_id FROM space") == [(main,)]


# --- group commit ------------------------------------------------------------------------------------


async def test_concurrent_sends_are_group_committed_and_durable(
    start_space: StartSpace, run_dir: Path, home: Path
) -> None:
    """16 clients each fire 50 sends at once: every one is acknowledged with the row the file holds, in
    fewer transactions than sends, and all of it is in the file once the host has closed."""
    space = await start_space(agent=silent())
    main = space.main
    server = await UnixServer.start(space.host, run_dir / "g.sock")
    clients = [await UserHostClient.connect_unix(server.path) for _ in range(16)]
    database = database_of(space)
    database.groups.clear()
    try:
        for client in clients:
            await client.initialize()

        async def fire(index: int, client: UserHostClient) -> list[dict[str, Any]]:
            made = [
                {
                    "client_input_id": f"c{index}-{n}",
                    "request_id": f"r{index}-{n}",
                    "text": f"note {index}/{n}",
                }
                for n in range(50)
            ]
            responses = await asyncio.gather(*(send(client, main, user_input) for user_input in made))
            return [result(response)["receipt"] for response in responses]

        acknowledged = [r for batch in await asyncio.gather(*map(fire, range(16), clients)) for r in batch]
    finally:
        for client in clients:
            await client.close()
        await server.close()
    transactions = list(database.groups)
    assert sum(writes for writes, _ in transactions) >= 800
    assert all(failed == 0 for _, failed in transactions), transactions
    assert len(transactions) < 800, f"{len(transactions)} transactions for 800 sends"
    await space.host.close()

    assert sorted(r["history_seq"] for r in acknowledged) == list(range(1, 801))
    saved = {
        row[0]: row
        for row in rows(
            store_path(home),
            "SELECT request_id, receipt_id, client_input_id, session_id, plugin_id, revision, history_seq, "
            "text_sha256, created_at, accepted_at, read_at FROM input_receipts",
        )
    }
    assert len(saved) == 800
    for receipt in acknowledged:
        assert saved[receipt["request_id"]] == (
            receipt["request_id"],
            receipt["receipt_id"],
            receipt["client_input_id"],
            main,
            "wuu.personal",
            1,
            receipt["history_seq"],
            receipt["text_sha256"],
            receipt["created_at"],
            receipt["accepted_at"],
            None,
        )
    messages = dict(rows(store_path(home), "SELECT seq, text FROM messages WHERE role = 'user'"))
    for receipt in acknowledged:
        text = messages[receipt["history_seq"]]
        assert hashlib.sha256(text.encode()).hexdigest() == receipt["text_sha256"]
        assert text == "note " + receipt["client_input_id"][1:].replace("-", "/")


async def test_a_failing_write_does_not_undo_the_rest_of_its_group(
    space: Space, connect: Connect, home: Path
) -> None:
    """A request-ID conflict and a reused client input ID fail inside the same transaction as six good
    sends: the two get their errors, the six are admitted and in the file."""
    client = await connect()
    first = {"client_input_id": "first", "request_id": "req-first", "text": "the original"}
    original = result(await send(client, space.main, first))["receipt"]
    await space.idle()

    database = database_of(space)
    blocker = sqlite3.connect(space.database, isolation_level=None)
    plug: asyncio.Future[Any] | None = None
    try:
        # Hold the file's write lock so that the writer stops on a first group (a write of the test's own
        # that changes nothing) while the eight sends queue up behind it: they are then committed as one
        # group, with the plug or after it.
        blocker.execute("BEGIN IMMEDIATE")
        plug = database.submit(search_index.indexed_through)
        good = [
            {"client_input_id": f"good-{n}", "request_id": f"req-good-{n}", "text": f"good {n}"}
            for n in range(6)
        ]
        conflict = {**first, "text": "another text"}
        reused = {"client_input_id": "first", "request_id": "req-reused", "text": "the original"}
        calls = [
            asyncio.ensure_future(send(client, space.main, user_input))
            for user_input in [conflict, *good, reused]
        ]
        await until(
            lambda: len(database._pending) == len(calls) + 1 and not database._queued,
            "the eight writes to be sent to the writer behind the plug",
        )
        blocker.execute("ROLLBACK")
        responses = await asyncio.gather(*calls)
        await plug
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()

    error(responses[0], UserHostErrorCode.REQUEST_ID_CONFLICT)
    error(responses[-1], UserHostErrorCode.INVALID_PARAMS, "user_input.client_input_id")
    admitted = [result(response) for response in responses[1:-1]]
    assert [a["replayed"] for a in admitted] == [False] * 6
    assert sorted(a["receipt"]["history_seq"] for a in admitted) == list(
        range(3, 9)
    )  # 1, 2: first and its answer
    assert (8, 2) in database.groups or (9, 2) in database.groups, database.groups

    saved = dict(rows(space.database, "SELECT request_id, receipt_id FROM input_receipts"))
    assert saved == {
        "req-first": original["receipt_id"],
        **{a["receipt"]["request_id"]: a["receipt"]["receipt_id"] for a in admitted},
    }
    assert rows(space.database, "SELECT text FROM messages WHERE seq = 1") == [("the original",)]
    assert sorted(
        text for (text,) in rows(space.database, "SELECT text FROM messages WHERE role = 'user'")
    ) == [
        "good 0",
        "good 1",
        "good 2",
        "good 3",
        "good 4",
        "good 5",
        "the original",
    ]
    replay = result(await send(client, space.main, first))
    assert replay["replayed"] is True and identity(replay["receipt"]) == identity(original)


def test_an_agent_steps_context_costs_the_same_however_long_the_conversation(tmp_path: Path) -> None:
    # Each message of the context is joined to its input receipt: by an index on the history sequence, not a
    # scan of the session's receipts (732 ms a step at 50,000 receipts, measured, against 0.1 ms).
    connection = sqlite3.connect(tmp_path / "store.sqlite")
    schema.migrate(connection)
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    history.context(connection, "s", 50)
    connection.set_trace_callback(None)
    [query] = [statement for statement in statements if "input_receipts" in statement]
    plan = connection.execute(f"EXPLAIN QUERY PLAN {query}").fetchall()
    connection.close()
    [join] = [detail for *_, detail in plan if detail.startswith("SEARCH r ")]
    assert "history_seq=?" in join, join
