"""The conformance suites by name (`--suite`): the v4 execution-worker protocol and the user-host RPC."""

from __future__ import annotations

from .userhost.suite import USERHOST
from .worker.suite import WORKER

SUITES = {suite.name: suite for suite in (WORKER, USERHOST)}
