"""Concurrent token commands (row `userhost.token-races`): rounds of `wuu-userhost token create` and `revoke`
released at the same instant in separate processes, against one space's token file.

Each round revokes about half of the tokens the rounds before it left, while it creates CREATES tokens of new
names: a third of them are revoked again by the process that created them (while the others still run), and
some ask for an `--out` file that exists already, so that their token is withdrawn. Then it checks:

- every command answered as it must (0, or 2 naming `--out`), and each create printed one token;
- every printed token that was not revoked authenticates as its name, and no revoked or withdrawn one does;
- the file names exactly the tokens that must be live, and no temporary file is left beside it.

The processes are forked from one that has imported the command line (`python -m tools.chaos.token_races`,
which reads the rounds' command lines on stdin and prints what each printed), held at a gate until all of
them exist, and released together; each runs `wuu-userhost`'s `main`. Forking spares dozens of start-ups
and makes the commands meet at the token file rather than one after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from wuu.host.userhost.cli import main as userhost_main
from wuu.host.userhost.tokens import TOKEN_PREFIX, TOKENS_FILE, TokenStore

from .campaign import Campaign, Context, Outcome

NAME = "userhost.token-races"
REPO = Path(__file__).resolve().parents[2]
FULL_ROUNDS = 50
"""Rounds at scale 1."""
CREATES = 24
"""New tokens per round, each created by its own process."""
FIRST_TOKENS = 8
"""Tokens created before the first round, for it to revoke."""
RACE_DEADLINE_S = 60.0
"""Seconds a round's processes may take, all together."""
SPACE, DOMAIN = "local", "personal"


@dataclass(frozen=True)
class Job:
    """One process of a round: `create`, `create-revoke` (create, then revoke the same name), `create-out`
    (create with an `--out` file that exists: refused, its token withdrawn) or `revoke` (an earlier token)."""

    kind: str
    name: str


@dataclass(frozen=True)
class Step:
    """What one command of a job's process did: its exit status and what it printed."""

    code: int
    out: str
    err: str


@dataclass
class Tally:
    """The tokens after a round, by name: those that must authenticate and those that must not (a withdrawn
    one was never shown: its name must be gone from the file)."""

    live: dict[str, str]
    revoked: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def binding(home: Path) -> list[str]:
    """The flags that name the raced space."""
    return ["--home", str(home), "--user-space", SPACE, "--product-domain", DOMAIN]


def store_of(home: Path) -> TokenStore:
    """The raced space's token store."""
    return TokenStore.of_space(home, SPACE, DOMAIN)


def plan(rng: random.Random, live: dict[str, str], creates: int, label: str) -> list[Job]:
    """A round's jobs in a random order: `creates` new names (a third revoked again, every fifth refused its
    `--out`) and the revocation of about half the `live` tokens."""
    jobs = [Job("revoke", name) for name in sorted(live) if rng.random() < 0.5]
    for number in range(creates):
        kind = "create-revoke" if number % 3 == 1 else "create-out" if number % 5 == 4 else "create"
        jobs.append(Job(kind, f"{label}-{number}"))
    rng.shuffle(jobs)
    return jobs


def commands(job: Job, home: Path, taken: Path) -> list[list[str]]:
    """The command lines a job's process runs, in order; `taken` is a file that exists."""
    named = ["--name", job.name, *binding(home)]
    if job.kind == "revoke":
        return [["token", "revoke", *named]]
    if job.kind == "create-out":
        return [["token", "create", *named, "--out", str(taken)]]
    create = [["token", "create", *named]]
    return [*create, ["token", "revoke", *named]] if job.kind == "create-revoke" else create


def tally(jobs: list[Job], results: list[list[Step]], live: dict[str, str]) -> Tally:
    """The tokens the round must have left, from what each process printed; a failure per command that did
    not answer as it must."""
    after = Tally(live=dict(live))
    for job, steps in zip(jobs, results, strict=True):
        wanted = [2] if job.kind == "create-out" else [0, 0] if job.kind == "create-revoke" else [0]
        if [step.code for step in steps] != wanted:
            after.failures.append(f"{job}: exit statuses {[s.code for s in steps]}, not {wanted}: {steps}")
            continue
        if job.kind == "revoke":
            after.revoked[job.name] = after.live.pop(job.name)
            continue
        if job.kind == "create-out":
            if steps[0].out or "--out" not in steps[0].err:
                after.failures.append(f"{job}: a refused --out printed {steps[0].out!r}, {steps[0].err!r}")
            continue
        token = steps[0].out.strip()
        if not token.startswith(TOKEN_PREFIX) or steps[0].out != token + "\n" or steps[0].err:
            after.failures.append(f"{job}: create printed {steps[0].out!r} and {steps[0].err!r}")
            continue
        if job.kind == "create-revoke":
            after.revoked[job.name] = token
        else:
            after.live[job.name] = token
    return after


def check_store(store: TokenStore, after: Tally) -> list[str]:
    """Failures of the store's own answers: each live token authenticates as its name, no revoked one does,
    and the file names the live tokens and nothing else."""
    failures = []
    store.refresh()
    for name, token in after.live.items():
        entry = store.authenticate(token)
        if entry is None or entry.name != name:
            failures.append(f"the printed token of {name!r} authenticates as {entry}")
    for name, token in after.revoked.items():
        if store.authenticate(token) is not None:
            failures.append(f"the revoked token of {name!r} still authenticates")
    names = [entry.name for entry in store.entries()]
    if sorted(names) != sorted(after.live):
        lost, extra = set(after.live) - set(names), set(names) - set(after.live)
        failures.append(f"the file lost {sorted(lost)} and holds {sorted(extra)} it must not")
    leftovers = sorted(p.name for p in store.path.parent.iterdir() if p.name.startswith(f".{TOKENS_FILE}"))
    if leftovers:
        failures.append(f"temporary files left beside the token file: {leftovers}")
    return failures


async def race(jobs: list[list[list[str]]]) -> list[list[Step]]:
    """Run each job's command lines in a process of its own, all released together; what each printed."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tools.chaos.token_races"),
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its forks are one process group, ended together on a timeout
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(json.dumps(jobs).encode()), RACE_DEADLINE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        raise AssertionError(f"the token commands ran over {RACE_DEADLINE_S:g} s") from None
    if process.returncode != 0:
        raise AssertionError(f"the racer exited {process.returncode}: {err.decode(errors='replace')[-2000:]}")
    return [[Step(**step) for step in steps] for steps in json.loads(out)]


async def play(home: Path, rng: random.Random, live: dict[str, str], creates: int, label: str) -> Tally:
    """One round against the space of `home` whose live tokens are `live`; the tokens it leaves and the
    failures of its commands (the tokens themselves are left for the caller to check)."""
    jobs = plan(rng, live, creates, label)
    taken = home / f"{label}.taken"
    taken.write_text("not a token\n")
    results = await race([commands(job, home, taken) for job in jobs])
    after = tally(jobs, results, live)
    if taken.read_text() != "not a token\n":
        after.failures.append("a refused --out overwrote the file that was there")
    return after


async def _run(context: Context) -> Outcome:
    rng = random.Random(context.seed)
    home = context.workdir / "home"
    home.mkdir()
    store = store_of(home)
    live = {f"first-{number}": store.create(f"first-{number}") for number in range(FIRST_TOKENS)}
    outcome = Outcome()
    for number in range(context.size(FULL_ROUNDS)):
        after = await play(home, rng, live, CREATES, f"round{number}")
        outcome.runs += 1
        failures = after.failures + check_store(store, after)
        if failures:
            rerun = context.rerun(NAME)
            outcome.failures += [f"round {number}: {failure}; rerun: {rerun}" for failure in failures]
            break
        live = after.live
    return outcome


CAMPAIGNS = [Campaign(NAME, _run)]


def _racer() -> None:
    """The racer's process: fork one process per job of the JSON list on stdin, release them together, and
    print their steps as JSON."""
    jobs: list[list[list[str]]] = json.load(sys.stdin)
    folder = Path(tempfile.mkdtemp(prefix="wuu-token-race-"))
    gate, opener = os.pipe()
    children = []
    for number, job in enumerate(jobs):
        pid = os.fork()
        if pid == 0:
            os.close(opener)
            os.read(gate, 1)  # returns once the racer closes the gate: every process exists by then
            _job(job, folder / f"{number}.json")
        children.append(pid)
    os.close(opener)
    results = []
    for number, pid in enumerate(children):
        _, status = os.waitpid(pid, 0)
        result = folder / f"{number}.json"
        if result.exists():
            results.append(json.loads(result.read_text()))
        else:
            results.append([{"code": -1, "out": "", "err": f"the process ended with wait status {status}"}])
    shutil.rmtree(folder)
    json.dump(results, sys.stdout)


def _job(job: list[list[str]], result: Path) -> NoReturn:
    """A forked process: run the job's command lines one after another, write what each did to `result`."""
    steps = []
    try:
        for argv in job:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = userhost_main(argv)
                except BaseException:  # a crash is a result too: its traceback is the failure's text
                    traceback.print_exc()
                    code = -1
            steps.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
        result.write_text(json.dumps(steps))
    finally:
        os._exit(0)


if __name__ == "__main__":
    _racer()
