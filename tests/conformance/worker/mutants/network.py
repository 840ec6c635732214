"""Mutants of the network policy: a binding's `command_network` ignored."""

from __future__ import annotations

from wuu.worker import ExecutionBackendV4
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import rewrite_initialize


@mutant(
    "ignores-command-network",
    "lets confined commands use TCP whatever command_network the binding names",
    "network.no-tcp",
)
def ignores_command_network(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The worker is bound as if the binding named no network policy (the SDK still pins it as asked)."""
    return rewrite_initialize(lambda params: {"command_network": None})(worker, backend)
