"""`python -m wuu.conformance.mutants NAME`: the native reference worker with one rule broken (see `--list`)."""

import sys

from . import main

sys.exit(main())
