"""The project's developer tools, run from the repository root as `python -m tools.<name>`.

- `generate`: spec/ -> generated/ (`make generate`, `make check-generated`);
- `speclint`: spec/ keeps its conventions; `parity`: every JSON message has its proto3 twin (`make lint`);
- `bench`: the native worker's, the user host's and the Personal store's speed beside raw baselines (`make bench`);
- `fixtures`: writes test data, e.g. a legacy review ledger (`python -m tools.fixtures.legacy_review_ledger`);
- `spec`: loads and bundles the spec, for the others; `templates`: the modules copied into generated/.

Not part of the `wuu` distribution.
"""
