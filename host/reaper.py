"""A worker's reaper: runs one worker as its only child and, once the worker has ended, ends the commands it
left behind.

    python -m wuu.host.reaper ARGV...

A worker that is killed cannot stop the commands it started (`wuu.worker.orphans`). The process above it
adopts them as the subreaper of its descendants and ends them, which ends every child that process has: right
for `wuu-host adapter`, which serves one worker, wrong for a user host, whose store's writer, other workers
and engines are its children too. A `local` or `command` environment in such a process (`base.ChildProcess`)
runs its worker through this reaper instead, whose one child is the worker.

The worker gets the reaper's standard streams, which the reaper then lets go of, so that the end of its input
and of its output are the host's and the worker's alone. The reaper exits as the worker did (killed by the
same signal, or with the same status) once the worker's orphans have ended, within `ORPHANS_S`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from wuu.worker.orphans import ORPHANS_S, adopt_orphans, end_orphans_now


def main() -> None:
    argv = sys.argv[1:]
    if not argv:
        print("usage: python -m wuu.host.reaper ARGV...", file=sys.stderr)
        sys.exit(2)
    adopt_orphans()
    try:
        worker = subprocess.Popen(argv)
    except OSError as error:
        print(f"wuu.host.reaper: {argv[0]}: {error}", file=sys.stderr)
        sys.exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1):
        os.dup2(null, stream)
    os.close(null)
    status = worker.wait()
    end_orphans_now(ORPHANS_S)
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


if __name__ == "__main__":
    main()
