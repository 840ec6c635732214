"""One distribution, import root `wuu`: each top-level folder is a subpackage of `wuu` (see README.md).

The build also compiles `wuu-confine` (worker/native/confine.c), the native worker's helper for starting a
confined command without forking the worker, with the C compiler `CC` (default `cc`). Without a compiler the
build goes on without it and the worker forks instead (worker/native/confine.py).
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

PACKAGE_DIRS = {
    "wuu.generated": "generated",
    "wuu.worker": "worker",
    "wuu.host": "host",
    "wuu.conformance": "conformance",
}
HELPER_PACKAGE = "wuu.worker.native"
HELPER_SOURCE = "confine.c"
HELPER = "wuu-confine"


def packages() -> list[str]:
    found = []
    for name, folder in PACKAGE_DIRS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            parts = init.parent.relative_to(folder).parts
            found.append(".".join((name, *parts)))
    return found


def compile_helper(source: Path, target: Path) -> None:
    """Compile the helper, static where the C library allows it (no loader to run at each exec); without a
    compiler, say so and build the rest."""
    compiler = shlex.split(os.environ.get("CC", "cc"))
    target.parent.mkdir(parents=True, exist_ok=True)
    common = ["-std=c11", "-O2", "-Wall", "-Wextra", "-s", "-o", str(target), str(source)]
    for linking in (["-static"], []):
        try:
            result = subprocess.run([*compiler, *linking, *common], capture_output=True, text=True)
        except OSError as error:
            print(
                f"wuu: no C compiler ({error}): {HELPER} is not built, confined commands fork",
                file=sys.stderr,
            )
            return
        if result.returncode == 0:
            return
    print(f"wuu: {HELPER} is not built, confined commands fork:\n{result.stderr}", file=sys.stderr)


class BuildWithHelper(build_py):
    """build_py, and the helper beside the package's modules (in the source tree for an editable install)."""

    def run(self) -> None:
        super().run()
        source = Path(self.get_package_dir(HELPER_PACKAGE)) / HELPER_SOURCE
        if self.editable_mode:
            target = source.with_name(HELPER)
        else:
            target = Path(self.build_lib, *HELPER_PACKAGE.split("."), HELPER)
        compile_helper(source, target)


class WithCompiledHelper(Distribution):
    """A distribution that holds compiled code (the helper): its files install as platform-specific ones."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for this platform (it carries the compiled helper) and for any Python 3: no extension module."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    packages=packages(),
    package_dir=PACKAGE_DIRS,
    distclass=WithCompiledHelper,
    cmdclass={"build_py": BuildWithHelper, "bdist_wheel": PlatformWheel},
)
