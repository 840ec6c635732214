"""The conformance suite of the v4 worker protocol: requirements, cases, and a runner for any adapter command."""
