"""The public conversation projection of the bundled store: the messages clients read and search."""

VISIBLE = "m.kind = 'text' AND m.hidden = 0"
"""The condition on a message row `m` that it is visible text, never hidden reasoning or an execution-tool
record."""
