"""`make bench`: the native worker's and the user host's speed beside raw baselines measured in the same run.

Usage: python -m tools.bench [--quick] [--json PATH] [--rounds N]    (from the repository root)

Every figure is measured on both sides in each round (5 rounds; round trips also alternate in blocks
within a round), the order of the sides alternating from one round to the next (ABAB). A figure is the
median over the rounds and its ratio the median of the rounds' ratios, since the machine is noisy:

- native: the native reference worker (`python -m wuu.worker`) driven through the typed host client
  (`WorkerClient.process_list(...)` etc.), which is what a user of the stack sees;
- wire: the same native worker driven through `WorkerClient.request` (frames only, no host-side models),
  shown for diagnosis: it isolates the worker's own cost;
- echo: the baseline, `echo.py` (asyncio + orjson, no protocol rules) driven through
  `WorkerClient.request`, so both sides pay the same framing cost and the ratio compares worker sides;
  for the typed round trip, the echo is driven through the same typed call (`WorkerClient.call` with the
  result model), so the client decodes the same reply on both sides.

The figures: small-request round trip p50/p99 (`process/list` on an empty registry: a method with no
I/O), typed and untyped, with the bench and the workers pinned to one CPU (on one CPU the round trip
is the work of both ends; unpinned, it measures where the scheduler put each worker: across two CPUs
of a virtual machine, waking the other CPU costs more than the work), and once, untyped, with the
workers on another CPU than the client (diag.); pipelined throughput with 64 requests in flight,
export of a file in 8 MiB chunks (the maximum), output streaming through `process/read` (8 MiB reads,
1 s waits) against a bare asyncio pipe read of the same command, cold start (spawn to the initialize
reply), `process/start` of `true` to its terminal `process/event` (permission modes unconfined and
standard) against a bare spawn and wait, and against the echo worker spawning `true` the same way (the
floor of any worker process: the client, the worker and the child share the CPUs), and the worker's
peak RSS above its idle size while it exports the file (VmRSS sampled, and VmHWM reset at idle).
The user host's figures (module `userhost`): the round trip p50/p99 of a cheap request
(`plugin/client/cancel` of an unused id, through the typed clients) on the Unix socket against a raw
NDJSON JSON-RPC echo (`jsonrpc_echo.py`) and on gRPC against a raw grpc.aio servicer (`grpc_echo.py`),
and the throughput of 16 clients of one socket with 64 requests in flight in all, against the same echo.
Rows marked (diag.) have no target; they say where time goes (e.g. the worker's CPU time per pipelined
request, from /proc/<pid>/task/*/schedstat).

It prints a table (figure, baseline, ratio, target, PASS/MISS) and writes JSON (`bench.json` by default)
with the machine, the configuration and every figure's per-round medians. No figure fails the command:
a missed target is reported, not raised. `--quick` is a smoke run with small sizes, for tests.

Modules: `__main__` (command line), `rounds` (the run, round by round), one module per family of
figures (`round_trips`, `exports`, `streaming`, `processes`, `cold_start`, `memory`), `workers` (the
workers under test and their clients), `config`, `samples`, `figures` (what is reported, with targets),
`report` (the table and the machine), `echo` (the baseline worker), and `userhost` with its baselines
`jsonrpc_echo` and `grpc_echo`.
"""
