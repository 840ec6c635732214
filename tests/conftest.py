"""Fixtures for the whole test suite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

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
