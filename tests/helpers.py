"""What many tests share: the repository's paths."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""
FIXTURES = ROOT / "tests" / "worker" / "fixtures"
"""Workers written for the tests (an SDK worker, a delegating worker)."""
