"""The fault campaign (`make chaos`, `python -m tools.chaos`): seeded faults against real worker processes.

Each module of `__main__.MODULES` exposes `CAMPAIGNS`; one run prints one table (case, runs, failures,
seconds) and fails when any case failed. `campaign.py` holds what every campaign shares.
"""
