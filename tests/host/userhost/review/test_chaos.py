"""kill -9 during `wuu state migrate-personal-review --apply`, at seeded points: while it reads the source, in
the middle of the import's transaction (once the destination's WAL has grown past a seeded size), and in the
checkpoint after its commit. After every kill an inspection finds one of the two allowed states, never half of one:

- `already-migrated`, the marker committed, and the destination holding exactly the source's rows;
- `migration-required`, no marker, and the destination untouched: absent, or with no table and no row.

The source is byte-identical after every kill. `make test` kills once at each of the five points; `make chaos`
sets `WUU_CHAOS_SCALE` to 8 (40 kills).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE, until
from tests.host.userhost.review.conftest import (
    COMMAND,
    PERSONAL,
    SPACE,
    destination_of,
    files_in,
    make_ledger,
    markers_in,
    rows_in,
    source_of,
)
from wuu.generated.models import ReviewLedgerMarkerStatus, ReviewLedgerMigrationStatus
from wuu.host.userhost.review import migrate, select
from wuu.host.userhost.review.snapshot import read_source
from wuu.host.userhost.storage.review_ledger.frozen import freeze

SCALE = int(os.environ.get("WUU_CHAOS_SCALE", "1"))
ACTIONS = 20_000
"""Enough rows (about 67,000) that the import's transaction spills into the WAL for a while before its commit."""
PHASES = ("source", "import", "import", "import", "checkpoint")
KILLS = len(PHASES) * SCALE


@dataclass(frozen=True)
class Template:
    """A user space with a big legacy ledger, what it holds, and how a full apply of it went."""

    home: Path
    rows: dict[str, list[tuple[Any, ...]]]
    digest: str
    seconds: float
    """How long an apply of it ran, start to exit."""
    destination_bytes: int
    """The size of the destination once migrated (about what the import writes into the WAL)."""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    home = tmp_path_factory.mktemp("chaos") / "home"
    state = home / "user-spaces" / SPACE / "personal" / "state"
    state.mkdir(parents=True)
    source = make_ledger(state, rows=ACTIONS, seed=7)
    snapshot = read_source(source)
    rows = {name: list(found) for name, found in snapshot.rows.items()}
    trial = home.parent / "calibration"
    shutil.copytree(home, trial)
    started = time.monotonic()
    done = _run(trial, snapshot.digest)
    assert done == 0
    seconds = time.monotonic() - started
    migrated = destination_of(trial / state.relative_to(home))
    return Template(home, rows, snapshot.digest, seconds, migrated.stat().st_size)


def _run(home: Path, digest: str) -> int:
    command = _apply(home, digest)
    return subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=DEADLINE
    ).returncode


def _apply(home: Path, digest: str) -> list[str]:
    return [
        *COMMAND,
        "--user-space",
        SPACE,
        "--home",
        str(home),
        *PERSONAL,
        "--apply",
        "--expect-source-digest",
        digest,
    ]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _trigger(
    phase: str, chance: random.Random, template: Template, destination: Path
) -> Callable[[float], bool]:
    """When to kill, given the seconds since the start: at a seeded moment while the source is read; once the
    import's transaction has spilled a seeded amount into the destination's WAL (before its commit, since in
    WAL mode only a checkpoint writes the main file); or once the checkpoint after the commit has written a
    seeded amount of the main file."""
    if phase == "source":
        moment = chance.uniform(0.1, 0.6) * template.seconds
        return lambda elapsed: elapsed >= moment
    if phase == "import":
        spilled = chance.uniform(0.02, 0.45) * template.destination_bytes
        return lambda elapsed: _size(Path(f"{destination}-wal")) >= spilled
    written = chance.uniform(0.05, 0.95) * template.destination_bytes
    return lambda elapsed: _size(destination) >= written


def _untouched(destination: Path) -> bool:
    """The destination does not exist, or holds no table (so no row and no marker)."""
    if not destination.exists():
        return True
    frozen = freeze(destination)
    try:
        (tables,) = frozen.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return bool(tables == 0)
    finally:
        frozen.close()


async def kill_once(seed: int, template: Template, home: Path) -> tuple[str, bool]:
    """Copy the template to `home`, start an apply, kill it at the seed's point, and check what an
    inspection finds; the status found, and whether the kill landed inside the import's transaction."""
    chance = random.Random(seed)
    phase = PHASES[seed % len(PHASES)]
    shutil.copytree(template.home, home)
    state = home / "user-spaces" / SPACE / "personal" / "state"
    source, destination = source_of(state), destination_of(state)
    wal = Path(f"{destination}-wal")
    sources = {name: found for name, found in files_in(state).items() if name.startswith(source.name)}
    trigger = _trigger(phase, chance, template, destination)
    process = await asyncio.create_subprocess_exec(
        *_apply(home, template.digest),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    started = time.monotonic()
    await until(lambda: process.returncode is not None or trigger(time.monotonic() - started), f"kill {seed}")
    inside = _size(wal) > 0
    if process.returncode is None:
        process.kill()
    code = await asyncio.wait_for(process.wait(), DEADLINE)
    where = f"kill {seed} ({phase})"
    assert code in (0, -9), f"{where}: the apply failed with {code}"

    after = {name: found for name, found in files_in(state).items() if name.startswith(source.name)}
    assert after == sources, f"{where} changed the source"
    result = await asyncio.to_thread(migrate, select(home, SPACE, "personal", None))
    assert result.source_digest == template.digest
    if result.status is ReviewLedgerMigrationStatus.ALREADY_MIGRATED:
        assert result.marker_status is ReviewLedgerMarkerStatus.COMMITTED
        assert rows_in(destination) == template.rows, f"{where}: migrated, but not every row"
        assert [marker[:2] for marker in markers_in(destination)] == [(result.source_path, template.digest)]
    else:
        assert result.status is ReviewLedgerMigrationStatus.MIGRATION_REQUIRED
        assert result.marker_status is ReviewLedgerMarkerStatus.ABSENT
        assert _untouched(destination), f"{where}: half an import is visible"
    return result.status.value, inside and code == -9


async def test_a_kill_during_apply_leaves_it_migrated_or_untouched(
    template: Template, tmp_path: Path
) -> None:
    outcomes = [await kill_once(seed, template, tmp_path / f"kill-{seed}") for seed in range(KILLS)]
    assert {status for status, _ in outcomes} == {"already-migrated", "migration-required"}, outcomes
    assert ("migration-required", True) in outcomes, f"no kill landed inside the import: {outcomes}"

    # An interrupted apply is simply run again.
    last = max(seed for seed, (status, _) in enumerate(outcomes) if status == "migration-required")
    home = tmp_path / f"kill-{last}"
    result = await asyncio.to_thread(migrate, select(home, SPACE, "personal", None), template.digest)
    assert result.status is ReviewLedgerMigrationStatus.MIGRATED
    destination = destination_of(home / "user-spaces" / SPACE / "personal" / "state")
    assert rows_in(destination) == template.rows
    frozen = freeze(destination)
    assert frozen.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    frozen.close()
