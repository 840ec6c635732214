"""The worker suite: the command under test is an adapter serving the v4 worker protocol on its stdio;
`session.py` says how each case starts it."""

from __future__ import annotations

from ..registry import Suite
from .session import Session

WORKER = Suite(
    name="worker",
    title="the v4 execution-worker protocol",
    registry="worker/requirements.json",
    cases_package="wuu.conformance.worker.cases",
    session=Session,
)
"""The worker suite."""
