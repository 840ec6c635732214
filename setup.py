"""One distribution, import root `wuu`: each top-level folder is a subpackage of `wuu` (see README.md).

The build also compiles `wuu-confine` (worker/native/confine.c), the native worker's helper for starting a
confined command without forking the worker, with the C compiler `CC` (default `cc`). Without a compiler the
build goes on without it and the worker forks instead (worker/native/confine.py).
"""

import os
import shlex
import shutil
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


COMPILER = shlex.split(os.environ.get("CC", "cc"))


def has_compiler() -> bool:
    """Whether the C compiler is there: the helper, and with it a platform-specific build, depend on it."""
    return bool(COMPILER) and shutil.which(COMPILER[0]) is not None


def compile_helper(source: Path, target: Path) -> None:
    """Compile the helper, static where the C library allows it (no loader to run at each exec); without a
    compiler, say so and build the rest (with no helper, not one left from an earlier build)."""
    target.unlink(missing_ok=True)
    if not has_compiler():
        print(f"wuu: no C compiler ({shlex.join(COMPILER)}): {HELPER} is not built, confined commands fork")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    common = ["-std=c11", "-O2", "-Wall", "-Wextra", "-s", "-o", str(target), str(source)]
    for linking in (["-static"], []):
        result = subprocess.run([*COMPILER, *linking, *common], capture_output=True, text=True)
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
    """A distribution that holds compiled code (the helper) where a compiler builds it: its files then install
    as platform-specific ones."""

    def has_ext_modules(self) -> bool:
        return has_compiler()


class PlatformWheel(bdist_wheel):
    """A wheel for this platform when it carries the compiled helper, for any Python 3 (no extension module)."""

    def get_tag(self) -> tuple[str, str, str]:
        tag = super().get_tag()
        return tag if self.root_is_pure else ("py3", "none", tag[2])


setup(
    packages=packages(),
    package_dir=PACKAGE_DIRS,
    distclass=WithCompiledHelper,
    cmdclass={"build_py": BuildWithHelper, "bdist_wheel": PlatformWheel},
)
