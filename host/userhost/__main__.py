"""`python -m wuu.host.userhost`: the `wuu-userhost` command."""

from .cli import entry

entry()
