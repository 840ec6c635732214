"""The user-host suite: the command under test serves the user-host RPC on its stdio (and, when it takes
`{socket}`, on that Unix socket); `session.py` says which placeholders it is given."""

from __future__ import annotations

from ..registry import Suite
from .session import HostSession

USERHOST = Suite(
    name="userhost",
    title="the user-host RPC",
    registry="userhost/requirements",
    cases_package="wuu.conformance.userhost.cases",
    session=HostSession,
)
"""The user-host suite."""
