"""The host side: execution environments (profiles and backends) and the adapter bridge.

`wuu-host adapter` serves the v4 worker protocol through a profile's backend; the worker protocol's
client itself is `wuu.worker.client.WorkerClient`.
"""
