"""The Node SDK as an npm package: `python -m tools.node_pack [--out DIR]` writes `wuu-plugin-sdk-<version>.tgz`.

In the repository the SDK (`node/plugin-sdk`) imports the files `make generate` writes into `generated/node`;
a package must hold them itself. The package is staged in a temporary folder: the SDK's `package.json`
(without `private` and the test script), its `src`, and `generated/node` as `generated`, with the one import
path that points outside the SDK rewritten to it; then `npm pack` makes the tarball, which installs with no
dependency and no network (`npm install ./wuu-plugin-sdk-0.1.0.tgz`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SDK = ROOT / "node" / "plugin-sdk"
GENERATED = ROOT / "generated" / "node"
IN_REPOSITORY = "'../../../generated/node/"
"""How the SDK's sources name the generated files in the repository..."""
IN_PACKAGE = "'../generated/"
"""...and in the package, where `generated` is beside `src`."""


def stage(into: Path) -> None:
    """Lay the package out in `into`."""
    manifest = json.loads((SDK / "package.json").read_text("utf-8"))
    manifest.pop("private", None)
    manifest.pop("scripts", None)  # the SDK's tests stay in the repository
    manifest["files"] = ["src", "generated"]
    (into / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    shutil.copytree(GENERATED, into / "generated")
    (into / "src").mkdir()
    for source in sorted((SDK / "src").iterdir()):
        text = source.read_text("utf-8").replace(IN_REPOSITORY, IN_PACKAGE)
        (into / "src" / source.name).write_text(text, "utf-8")
    outside = [path.name for path in (into / "src").iterdir() if "../../" in path.read_text("utf-8")]
    if outside:
        raise SystemExit(f"node_pack: {', '.join(outside)} still import from outside the package")


def pack(out: Path) -> Path:
    """Stage the package and `npm pack` it into `out`; the tarball's path."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        staged = Path(staging)
        stage(staged)
        run = subprocess.run(
            ["npm", "pack", "--json", "--pack-destination", str(out.resolve())],
            cwd=staged,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise SystemExit(f"node_pack: npm pack failed: {run.stderr.strip()}")
        (packed,) = json.loads(run.stdout)
    return out / packed["filename"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.node_pack", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where to write the tarball (dist/)")
    args = parser.parse_args(argv)
    print(pack(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
