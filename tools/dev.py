"""`make dev` (and its alias `make dev-personal`): a local Personal host for development, in the foreground.

Usage: python -m tools.dev    (from the repository root; WUU_HOME=/absolute/path keeps the data there)

It serves the user space `demo` of the product domain `personal`, composed by the shipped `personal` profile, on
a Unix socket and on loopback HTTP (a free port), and prints how to connect: the socket, the HTTP address and the
command that creates a token for an HTTP client. Without WUU_HOME the home is a throw-away folder, removed when
the host stops. The host's JSON logs go to stderr. Ctrl-C (SIGINT) or SIGTERM stops it; the exit status is the
host's, 2 when it cannot start (a relative WUU_HOME, a space another host serves).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

SPACE = "demo"
DOMAIN = "personal"


def _banner(home: Path, throwaway: bool, socket: Path, http: str) -> str:
    token = shlex.join(
        [
            *(str(Path(sys.executable).parent / "wuu-userhost"), "token", "create", "--home", str(home)),
            *("--user-space", SPACE, "--product-domain", DOMAIN, "--name", "phone"),
        ]
    )
    kept = "throw-away: removed when the host stops" if throwaway else "kept"
    return "\n".join(
        [
            f"Personal host of the user space {SPACE!r} (profile personal) is serving.",
            f"  home:   {home} ({kept})",
            f"  socket: {socket}    UserHostClient.connect_unix({str(socket)!r})",
            f"  http:   http://{http}    with a bearer token from:",
            f"          {token}",
            "Ctrl-C stops it.",
        ]
    )


def main() -> int:
    given = os.environ.get("WUU_HOME")
    if given and not Path(given).is_absolute():
        print(f"dev: WUU_HOME: {given!r} is not an absolute path", file=sys.stderr)
        return 2
    home = Path(given) if given else Path(tempfile.mkdtemp(prefix="wuu-dev-"))
    run = Path(
        tempfile.mkdtemp(prefix="wuu-dev-run-")
    )  # short and private: a socket path has at most 107 bytes
    socket = run / "userhost.sock"
    command = [
        *(sys.executable, "-m", "wuu.host.userhost", "serve", "--home", str(home)),
        *("--user-space", SPACE, "--product-domain", DOMAIN, "--composition-profile", "personal"),
        *("--listen", f"unix:{socket}", "--http", "127.0.0.1:0"),
    ]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def forward(number: int, frame: FrameType | None) -> None:
        # A terminal's Ctrl-C reaches the host too; a signal sent to this process alone must as well.
        process.send_signal(number)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, forward)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            sys.stderr.write(line)
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("message") == "listening" and entry.get("transport") == "http":
                print(_banner(home, not given, socket, str(entry.get("address"))), flush=True)
        return process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(run, ignore_errors=True)
        if not given:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
