"""Every campaign of the fault campaign (`make chaos`) at a small scale, one test per campaign.

A campaign runs as `python -m tools.chaos` runs it (its own work directory, a fixed seed); its failures are
the test's. The scale keeps each row to a few seconds (fuzz: about 2,000 frames per target, eof: a few
points). The schemathesis row is the one exception: `make test` runs its pytest file directly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.chaos.__main__ import campaigns, run_campaign
from tools.chaos.campaign import Campaign

SCALE = 0.02
SEED = 13
RUN_ELSEWHERE = {
    "schemathesis.userhost": "make test runs tests/host/userhost/test_http_schemathesis.py itself",
}


@pytest.mark.parametrize("campaign", campaigns(), ids=lambda campaign: campaign.name)
async def test_campaign(campaign: Campaign, tmp_path: Path) -> None:
    if campaign.name in RUN_ELSEWHERE:
        pytest.skip(RUN_ELSEWHERE[campaign.name])
    row = await run_campaign(campaign, SEED, SCALE, tmp_path)
    assert not row.failures, "\n".join(row.failures)
    assert row.runs >= 1 or row.note.startswith("skipped"), row
