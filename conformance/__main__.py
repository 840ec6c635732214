"""`python -m wuu.conformance`: the same as `wuu-conformance`."""

from .cli import entry

entry()
