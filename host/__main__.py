"""`python -m wuu.host`: the same as `wuu-host`."""

from .cli import entry

entry()
