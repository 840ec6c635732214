"""`search_content` through the native worker, beside the bare ripgrep run it wraps (`rg --json` over the
same tree, its output read whole), both in the same round."""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from collections import defaultdict
from pathlib import Path

from wuu.worker.client import WorkerClient

from .samples import Samples, alternate
from .workers import data_of

FILES = 200
LINES = 50
PATTERN = "needle_[0-9]+"
CALLS = 10


def make_tree(root: Path) -> Path:
    """FILES source-like files of LINES lines under `root`/search-tree, one in ten holding a match."""
    tree = root / "search-tree"
    for index in range(FILES):
        lines = [f"value_{index}_{line} = compute({line}, {index})" for line in range(LINES)]
        if index % 10 == 0:
            lines[LINES // 2] = f"needle_{index} = True"
        path = tree / f"pkg{index % 10}" / f"module_{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return tree


async def search_native(native: WorkerClient, tree: Path, root: Path) -> float:
    """Milliseconds of one search_content of the tree through the native worker."""
    arguments = {"pattern": PATTERN, "path": str(tree.relative_to(root))}
    data = {
        "tool": "search_content",
        "call": {"id": "bench", "arguments": json.dumps(arguments)},
        "actor": {"kind": "agent", "id": "bench"},
        "permission_mode": "standard",
    }
    began = time.perf_counter()
    result = await data_of(native, "execute", data)
    elapsed = time.perf_counter() - began
    if result["metadata"]["matches"] != FILES // 10:
        raise RuntimeError(f"search_content found {result['metadata']}")
    return elapsed * 1000


async def search_bare(rg: str, tree: Path) -> float:
    """Milliseconds of the same search by ripgrep alone, as the worker runs it."""
    argv = [
        rg,
        "--json",
        "--no-config",
        "--no-ignore",
        "--sort",
        "path",
        "--regexp",
        PATTERN,
        "--",
        str(tree),
    ]
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    await process.communicate()
    return (time.perf_counter() - began) * 1000


async def search_round(native: WorkerClient, root: Path, tree: Path, samples: Samples, index: int) -> None:
    """Round `index` of search_content beside bare rg (absent without ripgrep)."""
    rg = shutil.which("rg")
    if rg is None:
        samples.mark_absent("search_content/", "ripgrep (rg) is not installed")
        return
    await search_native(native, tree, root)
    await search_bare(rg, tree)
    timings: dict[str, list[float]] = defaultdict(list)
    for turn in range(CALLS):
        for side in alternate(("rg", "native"), index + turn):
            if side == "rg":
                timings[side].append(await search_bare(rg, tree))
            else:
                timings[side].append(await search_native(native, tree, root))
    for side, values in timings.items():
        samples.add(f"search_content/{side}", statistics.median(values))
