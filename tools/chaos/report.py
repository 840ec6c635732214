"""The campaign's one table (case, runs, failures, seconds, notes) and the failures under it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Row:
    """One campaign's line: `failures` holds its failure lines; `note` says why it was skipped, if it was."""

    case: str
    runs: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""


def table(rows: Sequence[Row]) -> str:
    """The table, then every failure line under its case's name."""
    header = ("case", "runs", "failures", "seconds", "notes")
    cells = [header] + [
        (row.case, str(row.runs), str(len(row.failures)), f"{row.seconds:.1f}", row.note) for row in rows
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(width) if column in (1, 2, 3) else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for row in rows:
        if row.failures:
            lines += ["", f"{row.case}: {len(row.failures)} failure(s)"]
            lines += [f"  - {failure}" for failure in row.failures]
    return "\n".join(lines)
