"""The bundled store's versioned schema: each migration takes the database from one version to the next.

The version is SQLite's `user_version`. Opening a store applies the migrations it lacks, each in its own
transaction; a store written by a newer build (a version this build does not know) is refused, untouched.
Migrations are only ever appended: a released one never changes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

MIGRATIONS: tuple[str, ...] = (
    # 1: the space, its sessions and their history, with the search index of the visible messages.
    """
    CREATE TABLE space (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        user_space_id TEXT NOT NULL,
        product_domain TEXT NOT NULL,
        main_session_id TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('main', 'task')),
        created_at TEXT NOT NULL
    ) WITHOUT ROWID;
    -- `id` orders messages as they were saved: search walks the index by it, newest first.
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (session_id),
        seq INTEGER NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        kind TEXT NOT NULL DEFAULT 'text' CHECK (kind IN ('text', 'reasoning', 'tool')),
        hidden INTEGER NOT NULL DEFAULT 0,
        truncated INTEGER NOT NULL DEFAULT 0,
        read_only INTEGER NOT NULL DEFAULT 0,
        background INTEGER NOT NULL DEFAULT 0,
        text TEXT NOT NULL,
        created_at TEXT,
        created_us INTEGER,
        question_id TEXT,
        UNIQUE (session_id, seq)
    );
    CREATE INDEX messages_by_time ON messages (session_id, created_us);
    -- Only visible text of the main conversation is indexed (the public conversation projection), case
    -- folded as Python folds it (full folding: "ß" is "ss"), so that a query folded alike matches.
    CREATE VIRTUAL TABLE messages_fts USING fts5 (
        text, content = '', tokenize = 'trigram case_sensitive 1'
    );
    """,
    # 2: input receipts and the attachments admission bound.
    """
    CREATE TABLE input_receipts (
        receipt_id TEXT PRIMARY KEY,
        request_id TEXT NOT NULL UNIQUE,
        binding_digest TEXT NOT NULL,
        revision INTEGER NOT NULL,
        session_id TEXT NOT NULL REFERENCES sessions (session_id),
        plugin_id TEXT NOT NULL,
        client_input_id TEXT NOT NULL,
        text_sha256 TEXT NOT NULL,
        created_at TEXT NOT NULL,
        accepted_at TEXT,
        history_seq INTEGER,
        read_at TEXT,
        UNIQUE (session_id, client_input_id)
    ) WITHOUT ROWID;
    CREATE INDEX receipts_unread ON input_receipts (session_id, history_seq) WHERE read_at IS NULL;
    CREATE TABLE attachments (
        attachment_id TEXT PRIMARY KEY,
        receipt_id TEXT NOT NULL REFERENCES input_receipts (receipt_id),
        position INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        filename TEXT NOT NULL,
        media_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        file TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX attachments_by_message ON attachments (session_id, message_seq, position);
    """,
    # 3: reactions, their request receipts and the locators of changes the agent has not yet seen.
    """
    CREATE TABLE reactions (
        session_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        owner TEXT,
        agent TEXT,
        revision INTEGER NOT NULL,
        PRIMARY KEY (session_id, message_seq)
    ) WITHOUT ROWID;
    CREATE TABLE reaction_receipts (
        id INTEGER PRIMARY KEY,
        request_id TEXT NOT NULL UNIQUE,
        session_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        actor TEXT NOT NULL CHECK (actor IN ('owner', 'agent')),
        emoji TEXT,
        expected_revision INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        applied_at TEXT NOT NULL
    );
    CREATE INDEX reaction_receipts_by_message ON reaction_receipts (session_id, message_seq, id);
    -- A locator is reserved before the reaction it points at is written; `done` marks the write finished.
    -- AUTOINCREMENT: ids are never reused once seen locators are deleted (the agent's mark compares ids).
    CREATE TABLE reaction_locators (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        done INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE reaction_marks (
        session_id TEXT PRIMARY KEY,
        seen INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # 4: hidden tasks, the delivery receipts of their replies, waiting-user questions, push registrations.
    """
    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        parent_id TEXT REFERENCES tasks (task_id),
        session_id TEXT NOT NULL REFERENCES sessions (session_id),
        request_id TEXT NOT NULL UNIQUE,
        requirements_version INTEGER NOT NULL,
        execution_attempt INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'waiting_user', 'completed', 'failed')),
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        outcome TEXT,
        revision INTEGER NOT NULL,
        updated_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX tasks_by_parent ON tasks (parent_id);
    CREATE TABLE task_deliveries (
        delivery_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        requirements_version INTEGER NOT NULL,
        execution_attempt INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('question', 'result', 'failure')),
        session_id TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'submitted', 'delivered', 'failed')),
        turn_id TEXT UNIQUE,
        history_seq INTEGER,
        failure_code TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        text TEXT NOT NULL,
        question_id TEXT,
        revision INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        created INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX deliveries_by_task ON task_deliveries (task_id);
    CREATE INDEX deliveries_by_status ON task_deliveries (status, created);
    CREATE TABLE questions (
        question_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        text TEXT NOT NULL,
        status TEXT CHECK (status IN ('answered', 'dismissed')),
        answer TEXT,
        request_id TEXT UNIQUE,
        decided_at TEXT
    ) WITHOUT ROWID;
    CREATE TABLE push_registrations (
        registration_id TEXT PRIMARY KEY,
        device_id TEXT NOT NULL,
        provider TEXT NOT NULL,
        app_id TEXT NOT NULL,
        token TEXT NOT NULL,
        registered_at TEXT NOT NULL,
        UNIQUE (device_id, app_id)
    ) WITHOUT ROWID;
    """,
    # 5: approval cards and their anchors in history, the owner's rules, the automatic-review setting, and the
    # request IDs of those writes.
    """
    ALTER TABLE messages ADD COLUMN approval_id TEXT;
    CREATE TABLE approval_cards (
        id INTEGER PRIMARY KEY,
        card_id TEXT NOT NULL UNIQUE,
        session_id TEXT NOT NULL REFERENCES sessions (session_id),
        call_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('main_chat', 'task')),
        task_id TEXT,
        action TEXT NOT NULL,
        digest TEXT NOT NULL,
        precondition TEXT NOT NULL,
        preview TEXT NOT NULL,
        summary TEXT NOT NULL,
        request_text TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('waiting', 'approved', 'running', 'succeeded', 'failed',
            'unknown', 'denied', 'expired', 'cancelled', 'stale')),
        revision INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        claimed_at TEXT,
        decision TEXT,
        review TEXT,
        receipt TEXT,
        updated_at TEXT NOT NULL,
        UNIQUE (session_id, call_id)
    );
    CREATE INDEX approval_cards_by_status ON approval_cards (status, id);
    CREATE TABLE approval_rules (
        rule_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('file', 'command')),
        match TEXT NOT NULL,
        match_digest TEXT NOT NULL UNIQUE,
        mode TEXT NOT NULL CHECK (mode IN ('automatic', 'ask_first')),
        paused INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        source_card_id TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE review_settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        automatic_review INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE approval_requests (
        request_id TEXT PRIMARY KEY,
        method TEXT NOT NULL,
        params_digest TEXT NOT NULL,
        target TEXT NOT NULL,
        created_at TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
    # 6: the Personal Memory service: memories and their versions. A forgotten memory's texts are NULL (the
    # store's secure_delete zeroes what they occupied); `touched` orders memories by their latest change.
    """
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,
        memory_id TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL CHECK (status IN ('active', 'forgotten')),
        version INTEGER NOT NULL,
        touched INTEGER NOT NULL,
        forgotten_at TEXT
    );
    CREATE INDEX memories_by_touch ON memories (status, touched);
    CREATE TABLE memory_versions (
        memory_id TEXT NOT NULL REFERENCES memories (memory_id),
        version INTEGER NOT NULL,
        text TEXT,
        author TEXT NOT NULL CHECK (author IN ('main_agent', 'task')),
        session_id TEXT NOT NULL,
        task_id TEXT,
        message_seq INTEGER,
        created_at TEXT NOT NULL,
        PRIMARY KEY (memory_id, version)
    ) WITHOUT ROWID;
    """,
    # 7: background tasks that execute: the transport that admitted each input, the tasks' dispatch and
    # execution records, the native authorization provider's grants and leases, and the `unauthorized` card
    # status with the lease an execution claim names (a CHECK constraint changes only with its table).
    """
    ALTER TABLE input_receipts ADD COLUMN admitted_by TEXT;
    CREATE TABLE task_dispatches (
        task_id TEXT PRIMARY KEY REFERENCES tasks (task_id),
        instructions TEXT NOT NULL,
        origin_input TEXT,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        grant_expires_at TEXT NOT NULL,
        execution_attempt INTEGER NOT NULL,
        run_status TEXT NOT NULL CHECK (run_status IN ('queued', 'running', 'awaiting', 'succeeded', 'failed',
            'unknown')),
        run_note TEXT,
        cards_after INTEGER NOT NULL,
        updated_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX task_dispatches_by_status ON task_dispatches (run_status);
    CREATE TABLE native_grants (
        grant_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        requirements_version INTEGER NOT NULL,
        tools TEXT NOT NULL,
        resources TEXT NOT NULL,
        model TEXT NOT NULL,
        authority TEXT NOT NULL,
        issued_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        expires_us INTEGER NOT NULL,
        revoked_at TEXT,
        fence INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE native_leases (
        lease_id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL REFERENCES native_grants (grant_id),
        fence INTEGER NOT NULL,
        card_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        acquired_at TEXT NOT NULL,
        released_at TEXT,
        outcome TEXT
    ) WITHOUT ROWID;
    CREATE TABLE approval_cards_7 (
        id INTEGER PRIMARY KEY,
        card_id TEXT NOT NULL UNIQUE,
        session_id TEXT NOT NULL REFERENCES sessions (session_id),
        call_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('main_chat', 'task')),
        task_id TEXT,
        action TEXT NOT NULL,
        digest TEXT NOT NULL,
        precondition TEXT NOT NULL,
        preview TEXT NOT NULL,
        summary TEXT NOT NULL,
        request_text TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('waiting', 'approved', 'running', 'succeeded', 'failed',
            'unknown', 'denied', 'expired', 'cancelled', 'stale', 'unauthorized')),
        revision INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        claimed_at TEXT,
        decision TEXT,
        review TEXT,
        receipt TEXT,
        updated_at TEXT NOT NULL,
        lease TEXT,
        UNIQUE (session_id, call_id)
    );
    INSERT INTO approval_cards_7 SELECT *, NULL FROM approval_cards;
    DROP TABLE approval_cards;
    ALTER TABLE approval_cards_7 RENAME TO approval_cards;
    CREATE INDEX approval_cards_by_status ON approval_cards (status, id);
    CREATE INDEX approval_cards_by_task ON approval_cards (task_id) WHERE task_id IS NOT NULL;
    """,
    # 8: the owner's attention settings (spec/schema/userhost/attention.schema.json): one row once they are set.
    """
    CREATE TABLE attention_settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        notifications INTEGER NOT NULL,
        quiet_start TEXT,
        quiet_end TEXT,
        quiet_time_zone TEXT,
        grouping_window_seconds INTEGER NOT NULL,
        updated_at TEXT NOT NULL
    );
    """,
    # 9: a message's receipt found by its history sequence, read or not: the agent's context joins every
    # message to its receipt, and without this index each join scanned the session's receipts (a step cost
    # grew with the conversation).
    """
    CREATE INDEX receipts_by_seq ON input_receipts (session_id, history_seq);
    """,
    # 10: the search index trails the history by a few messages (`search_index.py`): this row is its mark.
    # Until this version every message was indexed as it was saved, so the mark starts at the last one.
    """
    CREATE TABLE search_index (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        indexed_through INTEGER NOT NULL
    );
    INSERT INTO search_index SELECT 1, coalesce(max(id), 0) FROM messages;
    """,
)

VERSION = len(MIGRATIONS)
"""The schema version this build writes."""


class StoreVersionError(Exception):
    """The store was written by a newer build; it is left untouched."""


def check_version(path: Path) -> None:
    """StoreVersionError if the file's header names a version newer than this build's. It reads the
    header's `user_version` (bytes 60-63) without opening the database, so a refused file is left as it
    was: opening it would already switch a rollback-journal file to WAL. (A newer version still only in a
    WAL file is caught by `migrate`; opening a file already in WAL mode changes nothing.)"""
    with open(path, "rb") as file:
        header = file.read(100)
    if len(header) == 100 and header.startswith(b"SQLite format 3\x00"):
        found = int.from_bytes(header[60:64], "big")
        if found > VERSION:
            raise StoreVersionError(_newer(found))


def _newer(found: int) -> str:
    return (
        f"the store has schema version {found}, newer than this build's {VERSION}: "
        "open it with the build that wrote it"
    )


def migrate(connection: sqlite3.Connection, target: int = VERSION) -> int:
    """Bring the database up to `target`, one transaction per migration; the version it started at.

    The connection is in autocommit mode (`isolation_level=None`): each migration's script runs between
    its own BEGIN and COMMIT, with the new `user_version` inside the same transaction.
    """
    found: int = connection.execute("PRAGMA user_version").fetchone()[0]
    if found > VERSION:
        raise StoreVersionError(_newer(found))
    for version in range(found, target):
        try:
            connection.executescript(
                f"BEGIN IMMEDIATE; {MIGRATIONS[version]}; PRAGMA user_version = {version + 1}; COMMIT;"
            )
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
    return found
