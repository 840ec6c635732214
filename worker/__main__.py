"""`python -m wuu.worker`: the native reference worker on stdin/stdout (see `wuu.worker.native.cli`)."""

from .native.cli import main

main()
