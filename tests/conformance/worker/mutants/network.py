"""Mutants of the network policy: a binding's `command_network` ignored."""

from __future__ import annotations

from . import mutant
from .harness import rewrite_initialize

mutant(
    "ignores-command-network",
    "lets confined commands use TCP whatever command_network the binding names",
    "network.no-tcp",
)(rewrite_initialize(lambda params: {"command_network": None}))
