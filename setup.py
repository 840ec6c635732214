"""One distribution, import root `wuu`: each top-level folder is a subpackage of `wuu` (see README.md)."""

from pathlib import Path

from setuptools import setup

PACKAGE_DIRS = {
    "wuu.generated": "generated",
    "wuu.worker": "worker",
    "wuu.host": "host",
    "wuu.conformance": "conformance",
}


def packages() -> list[str]:
    found = []
    for name, folder in PACKAGE_DIRS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            parts = init.parent.relative_to(folder).parts
            found.append(".".join((name, *parts)))
    return found


setup(packages=packages(), package_dir=PACKAGE_DIRS)
