"""The conformance cases, one module per area; importing this package registers them all."""

import importlib
import pkgutil

from ..registry import CASES, Case

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def all_cases() -> dict[str, Case]:
    """Every case of the suite, by id."""
    return CASES
