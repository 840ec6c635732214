"""`python -m wuu.worker`: the native reference worker on stdin/stdout."""

from .native.worker import main

main()
