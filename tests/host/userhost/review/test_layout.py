"""The ledgers' layouts come from the spec's data, the digest is the spec's canonical dump (a hand-written
vector), and the fixture generator writes the legacy layout, leaving rows only in the WAL when asked."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from tests.helpers import DEADLINE, ROOT
from tests.host.userhost.review.conftest import content, counts_of, rows_in
from tools.fixtures.legacy_review_ledger import write_ledger
from wuu.host.userhost.review.snapshot import read_source
from wuu.host.userhost.storage.review_ledger import ReviewLedgerError
from wuu.host.userhost.storage.review_ledger.layout import LEGACY, MARKERS, PROVIDER, create_table


def test_the_provider_holds_the_legacy_tables_column_for_column_and_the_markers() -> None:
    assert [table.name for table in LEGACY.tables] == ["settings", "actions", "audit"]
    assert PROVIDER.tables == [*LEGACY.tables, MARKERS]
    assert PurePosixPath(LEGACY.file).parent == PurePosixPath(PROVIDER.file).parent
    assert (PurePosixPath(LEGACY.file).name, PurePosixPath(PROVIDER.file).name) == (
        "personal-review.sqlite",
        "review-ledger.sqlite",
    )
    assert (LEGACY.user_version, PROVIDER.user_version) == (None, 1)


def test_the_digest_is_the_canonical_dump_of_the_rows_in_key_order(tmp_path: Path) -> None:
    """A vector written out by hand: tables in layout order, TEXT keys bytewise, INTEGER keys numerically,
    strings escaped as RFC 8785 does, NULL as null, one line each."""
    path = tmp_path / "ledger.sqlite"
    connection = sqlite3.connect(path, isolation_level=None)
    for table in LEGACY.tables:
        connection.execute(create_table(table))
    connection.executemany(
        "INSERT INTO settings VALUES (?, ?, ?)",
        [("é", "true", "t"), ('a"b\\c', '{"x": "é"}', "2025-01-01T00:00:00Z"), ("Z", "1", "t")],
    )
    connection.execute(
        "INSERT INTO actions VALUES ('act_1', 'ses', 'k', 'tab\there\x01', '{}', 'proposed', 'c', NULL)"
    )
    connection.execute("INSERT INTO audit VALUES (10, 't', 'host', 'e', 'act_1', '{}')")
    connection.execute("INSERT INTO audit VALUES (2, 't', 'owner', 'e', NULL, '{}')")
    connection.close()
    dump = (
        r'["settings","Z","1","t"]' + "\n"
        r'["settings","a\"b\\c","{\"x\": \"é\"}","2025-01-01T00:00:00Z"]' + "\n"
        r'["settings","é","true","t"]' + "\n"
        r'["actions","act_1","ses","k","tab\there\u0001","{}","proposed","c",null]' + "\n"
        r'["audit",2,"t","owner","e",null,"{}"]' + "\n"
        r'["audit",10,"t","host","e","act_1","{}"]' + "\n"
    )
    snapshot = read_source(path)
    assert snapshot.digest == hashlib.sha256(dump.encode("utf-8")).hexdigest()
    assert snapshot.counts.to_wire() == {"settings": 3, "actions": 1, "audit": 2}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("ALTER TABLE audit ADD COLUMN extra TEXT", "its table audit does not have the layout's columns"),
        ("DROP TABLE settings", "it has no table settings"),
        (
            "DROP TABLE settings; CREATE TABLE settings (key TEXT NOT NULL, value BLOB NOT NULL, "
            "updated_at TEXT NOT NULL, PRIMARY KEY (key))",
            "its table settings does not have the layout's columns",
        ),
        ("INSERT INTO settings VALUES ('k', x'00', 't')", "settings.value holds bytes"),
    ],
)
def test_a_source_that_breaks_the_layout_is_refused(tmp_path: Path, change: str, problem: str) -> None:
    path = tmp_path / "ledger.sqlite"
    write_ledger(path, rows=2)
    with sqlite3.connect(path, isolation_level=None) as connection:
        connection.executescript(change)
    connection.close()
    with pytest.raises(
        ReviewLedgerError, match="does not follow the legacy review ledger's layout"
    ) as caught:
        read_source(path)
    assert problem in str(caught.value)


def test_the_generator_leaves_the_second_half_only_in_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    write_ledger(path, rows=20, seed=3, leave_wal=True)
    assert Path(f"{path}-wal").stat().st_size > 0
    assert not Path(f"{path}-shm").exists()
    main_only = tmp_path / "main-only" / "ledger.sqlite"
    main_only.parent.mkdir()
    shutil.copyfile(path, main_only)
    alone = rows_in(main_only)
    assert counts_of(alone) == {"settings": 4, "actions": 10, "audit": len(alone["audit"])}
    assert {row[0]: row[1] for row in alone["settings"]}["review.batch_size"] == "10"
    everything = rows_in(path)
    assert everything == content(20, 3)
    assert {row[0]: row[1] for row in everything["settings"]}["review.batch_size"] == "25"
    assert len(everything["audit"]) > len(alone["audit"])


def test_the_generator_command(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    command = [
        sys.executable,
        "-m",
        "tools.fixtures.legacy_review_ledger",
        str(path),
        "--rows",
        "6",
        "--seed",
        "2",
    ]
    done = subprocess.run(
        [*command, "--leave-wal"], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE
    )
    assert done.returncode == 0, done.stderr
    rows = content(6, 2)
    assert done.stdout == (
        f"{path}: 4 settings, 6 actions, {len(rows['audit'])} audit rows; the second half only in {path}-wal\n"
    )
    assert rows_in(path) == rows
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE)
    assert again.returncode == 2 and "exists already" in again.stderr
