"""Cases of the host's start (spec/schema/userhost/initialize.schema.json, `UserHostIsolationMode`): a host
asked for `verified_host` with no trusted verifier refuses to start, says why, and creates nothing first.

The command under test selects the mode through `{isolation}`; the suite has no verifier to give it, so
`verified_host` must be refused."""

from __future__ import annotations

from wuu.generated.models import UserHostErrorCode, UserHostIsolationMode

from ..session import HostSession
from ..suite import USERHOST

VERIFIED_HOST = UserHostIsolationMode.VERIFIED_HOST.value
REFUSAL = UserHostErrorCode.USER_HOST_ISOLATION_REQUIRED.value
SHOWN = 10
"""The most paths a failure names of what a refused start created."""


@USERHOST.case("startup.isolation-refused", "startup.failure-reported")
async def verified_host_refused(host: HostSession) -> None:
    """Started with {isolation} verified_host on an empty home (and no verifier), the command answers no
    initialize, exits with a non-zero status naming user_host_isolation_required on its stderr, and leaves
    its home empty."""
    if not host.has_isolation:
        host.skip("the command under test takes no {isolation}: its isolation mode cannot be selected")
    attempt = await host.attempt(VERIFIED_HOST)
    host.expect(
        not attempt.answer,
        f"started in {VERIFIED_HOST} with no verifier, the host answered initialize: "
        f"{attempt.answer[:300].decode('utf-8', 'replace')}",
    )
    host.expect(
        attempt.status is not None,
        f"started in {VERIFIED_HOST} with no verifier, the host did not exit within {host.timeout:g} s",
    )
    host.expect(attempt.status != 0, f"the refused start in {VERIFIED_HOST} exited with status 0")
    host.expect(
        REFUSAL in attempt.stderr,
        f"the refused start in {VERIFIED_HOST} does not name {REFUSAL} on its stderr",
    )
    created = sorted(str(path.relative_to(attempt.home)) for path in attempt.home.rglob("*"))
    host.expect(
        not created,
        f"the start refused in {VERIFIED_HOST} created {len(created)} paths under its home first: "
        f"{', '.join(created[:SHOWN])}",
    )
