"""Apply: refused with a wrong digest (nothing written); `migrated` with the rows of the source and the marker,
committed together; `already-migrated` afterwards, for apply and inspection alike, with the destination
byte-identical; a changed source or a populated, incompatible or foreign destination refused for operator
reconciliation, nothing overwritten."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.host.userhost.review.conftest import (
    PERSONAL,
    apply,
    content,
    counts_of,
    destination_of,
    digest_of,
    expected_result,
    files_in,
    inspect,
    make_ledger,
    markers_in,
    refused,
    rows_in,
    wuu,
)
from wuu.host.userhost.storage.review_ledger.layout import PROVIDER, create_table

RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def test_a_wrong_digest_is_refused_and_nothing_is_written(home: Path, state: Path) -> None:
    make_ledger(state, leave_wal=True)
    before = files_in(home)
    actual = digest_of(content())
    wrong = "0" * 64
    done = wuu(home, *PERSONAL, "--apply", "--expect-source-digest", wrong)
    refused(
        done, f"--expect-source-digest {wrong} is not the source's digest {actual}", "nothing was written"
    )
    assert files_in(home) == before
    assert not destination_of(state).exists()


def test_apply_imports_the_rows_and_commits_the_marker(home: Path, state: Path) -> None:
    source = make_ledger(state, leave_wal=True)
    source_files = {name: found for name, found in files_in(state).items() if name.startswith(source.name)}
    rows = content()
    digest = digest_of(rows)
    assert apply(home, digest) == expected_result(
        state, "migrated", digest, counts_of(rows), mode="apply", expected=digest
    )
    destination = destination_of(state)
    assert rows_in(destination) == rows == rows_in(source)
    ((path, marked, settings, actions, audit, migrated_at),) = markers_in(destination)
    assert (path, marked) == (os.path.realpath(source), digest)
    assert {"settings": settings, "actions": actions, "audit": audit} == counts_of(rows)
    assert RFC3339_UTC.match(migrated_at)
    with open(destination, "rb") as file:
        header = file.read(100)
    assert header[18:20] == b"\x02\x02"  # WAL mode
    assert int.from_bytes(header[60:64], "big") == PROVIDER.user_version
    after = {name: found for name, found in files_in(state).items() if name.startswith(source.name)}
    assert after == source_files  # the source, its -wal included, is as it was


def test_a_second_apply_and_inspection_are_already_migrated_and_write_nothing(
    home: Path, state: Path
) -> None:
    make_ledger(state)
    rows = content()
    digest = digest_of(rows)
    apply(home, digest)
    before = files_in(home)
    counts = counts_of(rows)
    again = expected_result(state, "already-migrated", digest, counts, mode="apply", expected=digest)
    assert apply(home, digest) == again
    assert inspect(home) == expected_result(state, "already-migrated", digest, counts)
    assert files_in(home) == before  # the destination is byte-identical, with its times
    wrong = "f" * 64
    refused(wuu(home, *PERSONAL, "--apply", "--expect-source-digest", wrong), "is not the source's digest")
    assert files_in(home) == before


def test_a_source_changed_after_its_migration_needs_reconciliation(home: Path, state: Path) -> None:
    source = make_ledger(state)
    digest = digest_of(content())
    apply(home, digest)
    with sqlite3.connect(source, isolation_level=None) as connection:
        connection.execute("INSERT INTO audit VALUES (100000, 't', 'owner', 'late.entry', NULL, '{}')")
    connection.close()
    before = files_in(home)
    message = refused(
        wuu(home, *PERSONAL), "changed after it was migrated", "requires operator reconciliation"
    )
    changed = re.search(r"the source now ([0-9a-f]{64})", message)
    assert changed is not None and changed.group(1) != digest
    done = wuu(home, *PERSONAL, "--apply", "--expect-source-digest", changed.group(1))
    refused(done, "changed after it was migrated", "requires operator reconciliation")
    assert files_in(home) == before


def _provider_with(path: Path, *statements: str, version: int | None = None) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    for statement in statements:
        connection.execute(statement)
    if version is not None:
        connection.execute(f"PRAGMA user_version = {version}")
    connection.close()


PROVIDER_TABLES = [create_table(table) for table in PROVIDER.tables]


@pytest.mark.parametrize(
    ("statements", "version", "phrase"),
    [
        (
            [*PROVIDER_TABLES, "INSERT INTO settings VALUES ('review.required', 'false', 't')"],
            1,
            "it holds 1 settings rows",
        ),
        (
            [
                *PROVIDER_TABLES,
                "INSERT INTO migration_markers VALUES ('/elsewhere/personal-review.sqlite', "
                "'" + "0" * 64 + "', 0, 0, 0, 't')",
            ],
            1,
            "it holds 1 migration_markers rows",
        ),
        (["CREATE TABLE notes (id INTEGER PRIMARY KEY)"], None, "it has schema version 0, not 1"),
        (PROVIDER_TABLES, 7, "it has schema version 7, not 1"),
        (
            [*PROVIDER_TABLES[:-1], "CREATE TABLE migration_markers (source_path TEXT)"],
            1,
            "migration_markers",
        ),
    ],
)
def test_a_populated_or_incompatible_destination_is_refused(
    home: Path, state: Path, statements: list[str], version: int | None, phrase: str
) -> None:
    make_ledger(state)
    _provider_with(destination_of(state), *statements, version=version)
    before = files_in(home)
    digest = digest_of(content())
    for args in ([], ["--apply", "--expect-source-digest", digest]):
        done = wuu(home, *PERSONAL, *args)
        refused(
            done, "is a populated or incompatible destination", phrase, "requires operator reconciliation"
        )
    assert files_in(home) == before


def test_a_destination_that_is_no_database_is_refused(home: Path, state: Path) -> None:
    make_ledger(state)
    destination_of(state).write_bytes(b"not a database, but a file someone keeps here\n" * 100)
    before = files_in(home)
    refused(wuu(home, *PERSONAL), "cannot be read as a SQLite database")
    assert files_in(home) == before


def test_an_empty_destination_left_by_an_interrupted_import_accepts_the_import(
    home: Path, state: Path
) -> None:
    make_ledger(state)
    destination_of(state).write_bytes(b"")
    rows = content()
    assert inspect(home)["status"] == "migration-required"
    assert apply(home, digest_of(rows))["status"] == "migrated"
    assert rows_in(destination_of(state)) == rows


def test_the_marker_is_bound_to_the_source_path(home: Path, state: Path, tmp_path: Path) -> None:
    """A migrated space copied to another home: its marker names the old path, so the copy's destination is
    populated for the copy's source, and needs reconciliation."""
    make_ledger(state)
    apply(home, digest_of(content()))
    moved = tmp_path / "moved"
    shutil.copytree(home, moved)
    refused(
        wuu(moved, *PERSONAL),
        "is a populated or incompatible destination",
        "requires operator reconciliation",
    )
