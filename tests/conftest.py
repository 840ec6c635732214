"""Fixtures for the whole test suite."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

# One test process runs gRPC servers and starts children (subprocess forks where it cannot vfork): gRPC's
# fork support would run its handlers in such a child, which then aborts on its poller's closed descriptors
# before it execs.
# Read by grpc when it is first imported, which is after this file.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from tests.helpers import DEADLINE, Spawner
from wuu.worker.client import WorkerClient


@pytest.fixture
async def spawn_client() -> AsyncIterator[Spawner]:
    """Start worker commands (`WorkerClient.spawn`'s arguments); every one is closed after the test.

    A test may close a client itself to check how it ended: closing an ended worker again is harmless.
    """
    clients: list[WorkerClient] = []

    async def spawn(argv: Sequence[str], **kwargs: Any) -> WorkerClient:
        client = await WorkerClient.spawn(argv, **kwargs)
        clients.append(client)
        return client

    yield spawn
    for client in clients:
        await client.close(budget=DEADLINE)
