"""What every campaign shares: its description, its context and outcome, its size, and the leak check.

A campaign is bounded (it stops by itself, with per-step deadlines) and leaves no process behind; every
failure is one line naming the seed and the command that reruns it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Outcome:
    """What a campaign did: how many runs (frames, kill points, ...) and one line per failure."""

    runs: int = 0
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    """What a campaign run gets: its seed, its scale (1.0 = `make chaos`), a private work directory and a log."""

    seed: int
    scale: float
    workdir: Path
    log: Callable[[str], None]

    def size(self, full_size: int) -> int:
        """The number of runs of a campaign whose full size (at scale 1) is `full_size`."""
        return max(1, round(full_size * self.scale))

    def rerun(self, name: str) -> str:
        """The command that reruns campaign `name` with this seed and scale."""
        return f".venv/bin/python -m tools.chaos --only {name} --seed {self.seed} --scale {self.scale:g}"


@dataclass(frozen=True)
class Campaign:
    """One row of the table: `run` does the work; `needs` names a service ("docker", "ssh") or is None."""

    name: str
    run: Callable[[Context], Awaitable[Outcome]]
    needs: str | None = None


def traceback_in(text: str) -> str | None:
    """The first traceback in a process's stderr `text`, shortened to where it was raised and what; or None."""
    if "Traceback (most recent call last)" not in text:
        return None
    lines = text[text.index("Traceback (most recent call last)") :].splitlines()[1:]
    end = next((i for i, line in enumerate(lines) if line and not line.startswith(" ")), len(lines) - 1)
    frames = [line.strip() for line in lines[:end] if line.strip().startswith("File ")]
    return " | ".join([*frames[-3:], lines[end] if lines else ""])


def _marked(pid: int, marks: tuple[bytes, ...]) -> bool:
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_bytes()
        if stat[stat.rindex(b")") + 2 :][:1] in (b"Z", b"X"):
            return False  # a zombie holds nothing; its parent reaps it
        texts = [(proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()]
        texts.append(os.readlink(proc / "cwd").encode())
    except OSError:  # gone meanwhile, or not ours to read
        return False
    return any(mark in text for mark in marks for text in texts)


def leftover_processes(*marks: str | Path) -> list[int]:
    """The live processes (not this one) whose command line, environment or working directory contains
    one of `marks` (a run's work directory, a marker variable's value)."""
    encoded = tuple(str(mark).encode() for mark in marks)
    me = os.getpid()
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and int(entry.name) != me and _marked(int(entry.name), encoded)
    ]


def reap_leftovers(*marks: str | Path) -> list[str]:
    """Kill what `leftover_processes` finds (so that one failure does not leak into the next run); each one
    as `pid (command line)`."""
    found = []
    for pid in leftover_processes(*marks):
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
            state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
            found.append(f"{pid} ({command.strip()[:120]}; state {state}, parent {parent})")
            os.kill(pid, signal.SIGKILL)
    return found
