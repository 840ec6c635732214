"""The native worker behind `delegate_execution_backend_v4`, on stdio: the fuzz campaign's delegate target.

Run as `python -m tools.chaos.delegating_worker` from the repository's root.
"""

from __future__ import annotations

import asyncio
import sys

from wuu.worker import delegate_execution_backend_v4, run_execution_backend_v4

if __name__ == "__main__":
    peer = delegate_execution_backend_v4(
        command=[sys.executable, "-m", "wuu.worker"], capabilities=["process.start.v1"]
    )
    asyncio.run(run_execution_backend_v4(peer))
