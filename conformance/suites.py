"""The conformance suites: the v4 execution-worker protocol and the user-host RPC."""

from __future__ import annotations

from .registry import Suite
from .session import Session
from .userhost.suite import USERHOST

WORKER = Suite(
    name="worker",
    title="the v4 execution-worker protocol",
    registry="requirements.json",
    cases_package="wuu.conformance.cases",
    session=Session,
)
"""The worker suite: the command under test is an adapter serving the worker protocol on its stdio."""

SUITES = {suite.name: suite for suite in (WORKER, USERHOST)}
