"""A FAKE container runtime for the apptainer backend's tests: no Apptainer or Singularity can be installed on
these machines, so this stands in for `RUNTIME exec` and checks the command line the backend gives it.

It takes the options the backend uses, writes its argv (JSON, one line per run) to $FAKE_APPTAINER_LOG, and
runs the worker in bubblewrap with the bind the real runtime would make, so that the files the worker writes
land in the bind's source. The image must be a file, as a SIF is; its contents are not read, and its
`python3` is this interpreter (the one with wuu installed). `--cpus` and `--memory` are refused with the
real runtime's message on a host whose cgroups it cannot use, so the tests see that failure path too.
Not the runtime: what runs in a real container (its filesystem, its namespaces, its limits) is the live
test's to check (WUU_EXECUTION_E2E_SIF).
"""

from __future__ import annotations

import json
import os
import sys

VALUED = {"--pwd", "--bind", "--cpus", "--memory", "--memory-swap", "--network"}
FLAGS = {"--containall", "--net"}


def main(argv: list[str]) -> int:
    with open(os.environ["FAKE_APPTAINER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if not argv or argv[0] != "exec":
        print(f"FATAL: fake runtime: only `exec` is faked, not {argv[:1]}", file=sys.stderr)
        return 255
    options: dict[str, str] = {}
    rest = argv[1:]
    while rest and rest[0].startswith("--"):
        name = rest.pop(0)
        if name in FLAGS:
            options[name] = ""
        elif name in VALUED and rest:
            options[name] = rest.pop(0)
        else:
            print(f"FATAL: fake runtime: unknown option {name}", file=sys.stderr)
            return 255
    if "--cpus" in options or "--memory" in options:
        print(
            "FATAL:   container creation failed: while applying cgroups config: "
            "cgroups v2 is not available to this user",
            file=sys.stderr,
        )
        return 255
    image, *worker = rest
    if not os.path.isfile(image):
        print(f"FATAL:   could not open image {image}: failed to retrieve path for {image}", file=sys.stderr)
        return 255
    source, target, *mode = options["--bind"].split(":")
    bind = "--ro-bind" if mode == ["ro"] else "--bind"
    if worker[:1] == ["python3"]:
        worker[0] = sys.executable
    os.execvp(
        "bwrap",
        [
            "bwrap",
            "--dev-bind", "/", "/",
            "--unshare-pid", "--unshare-ipc", "--proc", "/proc",
            "--tmpfs", os.path.dirname(target),
            bind, source, target,
            "--chdir", options["--pwd"],
            "--", *worker,
        ],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
