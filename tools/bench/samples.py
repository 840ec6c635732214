"""Per-round samples, and how the rounds share out and order the measurements."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence


class Samples:
    """Per-round values of every side of every figure; a figure's value is the median over the rounds."""

    def __init__(self) -> None:
        self.rounds: dict[str, list[float]] = defaultdict(list)
        self.absent: dict[str, str] = {}

    def mark_absent(self, prefix: str, why: str) -> None:
        """No samples of the keys starting with `prefix` (e.g. `conn/docker`) can be taken here, for `why`."""
        self.absent[prefix] = why

    def why_absent(self, key: str) -> str | None:
        """Why `key` has no samples, when it was marked absent."""
        return next((why for prefix, why in self.absent.items() if key.startswith(prefix)), None)

    def add(self, key: str, value: float) -> None:
        """Record one round's value of `key` (a figure's side, e.g. `rtt_p50/native`)."""
        self.rounds[key].append(value)

    def median(self, key: str) -> float:
        """The median of `key` over the rounds."""
        return statistics.median(self.rounds[key])


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def alternate(sides: Sequence[str], round_index: int) -> list[str]:
    """The order of the sides in a round: as given in even rounds, reversed in odd ones (ABAB)."""
    return list(sides) if round_index % 2 == 0 else list(reversed(sides))


def share(total: int, rounds: int, index: int) -> int:
    """Round `index`'s part of `total` samples spread over `rounds` rounds."""
    return total // rounds + (1 if index < total % rounds else 0)
