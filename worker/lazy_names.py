"""A package's public names loaded on first use (PEP 562), for packages whose import must stay cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def loader(package: str, module_of: Mapping[str, str]) -> Callable[[str], Any]:
    """The package's module `__getattr__`: a name of `module_of` is imported from its module (relative to the
    package) the first time it is asked for, and kept in the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
