"""A connection's transcript: every frame sent and received, in order, as a reproducer a person can replay."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Transcript:
    """The frames of one connection, each kept to its first `keep` bytes (a long-lived record stays small).

    `entries` holds `(">", bytes)` for what was sent and `("<", bytes)` for what was received.
    """

    entries: list[tuple[str, bytes]] = field(default_factory=list)
    keep: int = 4096
    enabled: bool = True

    def sent(self, data: bytes) -> None:
        if self.enabled:
            self.entries.append((">", data[: self.keep]))

    def received(self, data: bytes) -> None:
        if self.enabled:
            self.entries.append(("<", data[: self.keep]))

    def received_lines(self) -> list[bytes]:
        """Every frame received so far, in order."""
        return [data for direction, data in self.entries if direction == "<"]

    def render(self, limit: int = 2000) -> str:
        """The transcript as text: one line per frame, `> ` sent and `< ` received, each cut at `limit`."""
        lines = []
        for direction, data in self.entries:
            text = data.decode("utf-8", "replace").rstrip("\n")
            lines.append(f"{direction} {text[:limit]}{' ...' if len(text) > limit else ''}")
        return "\n".join(lines)
