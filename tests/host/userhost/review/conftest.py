"""Fixtures of the review-ledger migration tests: a user space's Personal state folder with a legacy ledger
written by the fixture generator, the `wuu` command as a real process, the exact JSON results it must print,
and records of files that must not change (bytes and modification times: the tests run as root, where a
read-only mode does not stop a write).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE
from tools.fixtures.legacy_review_ledger import generate, write_ledger
from wuu.host.userhost.storage.review_ledger.frozen import freeze
from wuu.host.userhost.storage.review_ledger.layout import LEGACY_FILE, PROVIDER_FILE, RECORDS, read_rows

COMMAND = [str(Path(sys.executable).parent / "wuu"), "state", "migrate-personal-review"]
PERSONAL = ["--composition-profile", "personal"]
SPACE = "local"


@pytest.fixture
def state(home: Path) -> Path:
    """The Personal state folder of user space `local` (created, empty)."""
    path = home / "user-spaces" / SPACE / "personal" / "state"
    path.mkdir(parents=True, mode=0o700)
    return path


def source_of(state: Path) -> Path:
    """The legacy ledger of a state folder."""
    return state / LEGACY_FILE


def destination_of(state: Path) -> Path:
    """The bundled provider's file of a state folder."""
    return state / PROVIDER_FILE


def make_ledger(state: Path, rows: int = 40, seed: int = 1, leave_wal: bool = False) -> Path:
    """Write the state folder's legacy ledger with the fixture generator; its path."""
    path = source_of(state)
    write_ledger(path, rows, seed, leave_wal)
    return path


def wuu(
    home: Path | None, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `wuu state migrate-personal-review --user-space local [--home HOME] ARGS` to its end."""
    where = ["--home", str(home)] if home is not None else []
    return subprocess.run(
        [*COMMAND, "--user-space", SPACE, *where, *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
    )


def succeeded(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON result of a run that exited 0 with nothing on stderr."""
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def refused(done: subprocess.CompletedProcess[str], *phrases: str) -> str:
    """The message of a run that exited 2 with no result; it contains every one of `phrases`."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    for phrase in phrases:
        assert phrase in done.stderr, (phrase, done.stderr)
    return done.stderr


def inspect(home: Path, *args: str) -> dict[str, Any]:
    """The result of an inspection with the Personal profile."""
    return succeeded(wuu(home, *PERSONAL, *args))


def apply(home: Path, digest: str, *args: str) -> dict[str, Any]:
    """The result of an apply with the Personal profile and `digest`."""
    return succeeded(wuu(home, *PERSONAL, "--apply", "--expect-source-digest", digest, *args))


def expected_result(
    state: Path,
    status: str,
    digest: str,
    counts: Mapping[str, int],
    *,
    mode: str = "inspect",
    expected: str | None = None,
) -> dict[str, Any]:
    """The exact JSON result the command prints for the state folder's ledger."""
    return {
        "status": status,
        "mode": mode,
        "user_space_id": SPACE,
        "composition_profile": "personal",
        "selected_provider": "wuu.review-ledger.sqlite",
        "source_path": os.path.realpath(source_of(state)),
        "source_digest": digest,
        "expected_source_digest": expected,
        "row_counts": dict(counts),
        "marker_status": "absent" if status == "migration-required" else "committed",
    }


def content(rows: int = 40, seed: int = 1) -> dict[str, list[tuple[Any, ...]]]:
    """The logical content of a generated ledger, by table, in primary-key order (a later setting replaces
    an earlier one of the same key)."""
    first, second = generate(rows, seed)
    settings = {row[0]: row for row in [*first.settings, *second.settings]}
    return {
        "settings": sorted(settings.values(), key=lambda row: row[0].encode()),
        "actions": sorted([*first.actions, *second.actions], key=lambda row: row[0].encode()),
        "audit": sorted([*first.audit, *second.audit], key=lambda row: row[0]),
    }


def counts_of(rows: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    return {name: len(table) for name, table in rows.items()}


def digest_of(rows: Mapping[str, Sequence[Sequence[Any]]]) -> str:
    """The spec's digest, computed here on its own: one compact JSON line per row, tables in layout order."""
    digest = hashlib.sha256()
    for name in ("settings", "actions", "audit"):
        for row in rows[name]:
            line = json.dumps([name, *row], ensure_ascii=False, separators=(",", ":"))
            digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def rows_in(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The record tables of a SQLite file (through a frozen copy), by table, in primary-key order."""
    frozen = freeze(path)
    try:
        return {table.name: read_rows(frozen, table) for table in RECORDS}
    finally:
        frozen.close()


def markers_in(path: Path) -> list[tuple[Any, ...]]:
    """The migration markers of a provider's file (through a frozen copy)."""
    frozen = freeze(path)
    try:
        return list(frozen.execute("SELECT * FROM migration_markers ORDER BY source_path"))
    finally:
        frozen.close()


def files_in(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below `folder` with its bytes and modification time, and the folders with their times."""
    found: dict[str, tuple[bytes, int]] = {}
    for root, dirs, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            found[str(path.relative_to(folder))] = (path.read_bytes(), path.stat().st_mtime_ns)
        for name in dirs:
            path = Path(root, name)
            found[f"{path.relative_to(folder)}/"] = (b"", path.stat().st_mtime_ns)
    found["./"] = (b"", folder.stat().st_mtime_ns)
    return found
