"""The worker suite: cases, the session and the requirement registry for any adapter serving the v4 worker protocol."""
