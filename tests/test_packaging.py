"""One distribution, import root `wuu`: a built wheel installs and imports outside the repository, with the
confined-start helper where a C compiler built it and as a pure wheel where none could."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_imports_outside_the_repository(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("wuu-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "wuu/generated/py.typed" in names
    assert "wuu/generated/schema/bundle.json" in names
    assert "wuu/generated/schema/methods/worker.json" in names
    assert "wuu/host/backends/ssh_launcher.sh" in names, "the ssh backend's launcher is package data"
    assert not [
        name for name in names if name.split("/")[0] in ("host", "worker", "generated", "conformance")
    ]

    if shutil.which(os.environ.get("CC", "cc").split()[0]):
        # The compiled helper that starts confined commands makes the wheel one for this platform.
        helper = archive.getinfo("wuu/worker/native/wuu-confine")
        assert helper.external_attr >> 16 & 0o111, "the helper is executable"
        assert wheel.name.startswith("wuu-0.1.0-py3-none-linux_"), wheel.name

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    probe = (
        "import wuu.generated.models as m, wuu.generated.validators as v, wuu.generated.catalog as c;"
        "v.validate('ProcessGetParams', {'id': 'p'});"
        "assert c.WORKER_METHODS['process/get'].params is m.ProcessGetParams;"
        "import importlib.resources as r;"
        "assert ' attach ' in r.files('wuu.host.backends').joinpath('ssh_launcher.sh').read_text();"
        "import wuu.worker.native.confine as h, shutil, os;"
        "assert h.helper() or not shutil.which(os.environ.get('CC', 'cc').split()[0]);"
        "print(m.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(target / "wuu" / "generated" / "models.py")

    # Without a C compiler the build goes on: a wheel for any platform, with no helper (the worker forks).
    pure = tmp_path / "pure"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(pure), str(ROOT)],
        env={**os.environ, "CC": str(tmp_path / "no-such-cc")},
        check=True,
        timeout=300,
    )
    (wheel,) = pure.glob("wuu-*.whl")
    assert wheel.name == "wuu-0.1.0-py3-none-any.whl"
    assert "wuu/worker/native/wuu-confine" not in zipfile.ZipFile(wheel).namelist()
