// Commands and background processes: spawning with one combined stdout+stderr stream, process
// groups, the retained output log, and the process registry behind process/*.

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { toNumber, WorkerError } from './validate.mjs';

export const DEFAULT_OUTPUT_RETENTION_BYTES = 8388608; // default_output_retention_bytes
// output_flow wait_for_reader: the output stops being read while one more chunk (a pipe read is at most
// 64 KiB; this leaves room for four) could push an unread byte out of the retention.
const READ_SLACK_BYTES = 262144;
const OUTPUT_DRAIN_MS = 100; // how long output may keep arriving after the leader exits
const TREE_POLL_MS = 20;
const TIMER_MAX_MS = 2147483647;
export const MINIMAL_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const nowIso = () => new Date().toISOString();
const signalName = (sig) => (typeof sig === 'string' ? sig.replace(/^SIG/, '') : null);

export function cancelledError() {
  return new WorkerError('cancelled', 'the request was cancelled');
}

// Sends a signal to a whole process group; a missing group is not an error.
export function killGroup(pid, sig) {
  if (!pid) return;
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

const HAVE_PROC = fs.existsSync('/proc/self/stat');

// Whether the process group still has a live (non-zombie) member. A zombie that waits for a slow
// reaper has already ended; /proc tells them apart where it exists.
export function groupAlive(pid) {
  if (!pid) return false;
  try {
    process.kill(-pid, 0);
  } catch (e) {
    if (e.code !== 'EPERM') return false;
  }
  if (!HAVE_PROC) return true;
  let names;
  try {
    names = fs.readdirSync('/proc');
  } catch {
    return true;
  }
  for (const name of names) {
    if (!/^[0-9]+$/.test(name)) continue;
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${name}/stat`, 'latin1');
    } catch {
      continue;
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] state, fields[1] ppid, fields[2] pgrp
    if (Number(fields[2]) === pid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}

// A connected pair of Unix stream sockets: the child gets `writer` as both stdout and stderr, so
// the two streams are combined in the order the child wrote them.
async function socketPair(dir) {
  let sockPath = path.join(dir, `o-${randomBytes(6).toString('hex')}.sock`);
  // Socket paths are limited to about 100 bytes; Linux offers the abstract namespace instead.
  if (Buffer.byteLength(sockPath) > 100 && process.platform === 'linux') {
    sockPath = `\0wuu-node-worker-${process.pid}-${randomBytes(8).toString('hex')}`;
  }
  const server = net.createServer({ pauseOnConnect: true });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(sockPath, resolve);
  });
  try {
    const accepted = new Promise((resolve) => server.once('connection', resolve));
    const writer = net.connect(sockPath);
    await new Promise((resolve, reject) => {
      writer.once('connect', resolve);
      writer.once('error', reject);
    });
    const reader = await accepted;
    return { reader, writer };
  } finally {
    server.close();
  }
}

// Spawns argv in its own process group. Resolves to {child, reader} or {error}.
export async function spawnCombined(argv, { cwd, env, stdin, sockDir }) {
  const { reader, writer } = await socketPair(sockDir);
  let child;
  try {
    child = spawn(argv[0], argv.slice(1), {
      cwd,
      env,
      stdio: [stdin ? 'pipe' : 'ignore', writer, writer],
      detached: true,
    });
  } catch (error) {
    writer.destroy();
    reader.destroy();
    return { error };
  }
  writer.destroy();
  if (child.pid === undefined) {
    const error = await new Promise((resolve) => child.once('error', resolve));
    reader.destroy();
    return { error };
  }
  child.on('error', () => {});
  if (child.stdin) child.stdin.on('error', () => {});
  reader.on('error', () => {});
  return { child, reader }; // paused: the caller attaches its listeners, then resumes it
}

function spawnFailureText(argv, error) {
  const code = error && error.code ? error.code : 'error';
  if (code === 'ENOENT') return `${argv[0]}: command not found`;
  if (code === 'EACCES') return `${argv[0]}: permission denied`;
  return `${argv[0]}: ${error && error.message ? error.message : code}`;
}

// Runs a command to completion (exec_command). Output is capped at `outputCap` bytes.
export async function runCommand(argv, { cwd, env, timeoutMs, signal, sockDir, outputCap }) {
  const t0 = process.hrtime.bigint();
  const spawned = await spawnCombined(argv, { cwd, env, stdin: false, sockDir });
  if (spawned.error) {
    const code = spawned.error.code === 'EACCES' ? 126 : 127;
    return {
      output: Buffer.from(`${spawnFailureText(argv, spawned.error)}\n`),
      exitCode: code,
      signal: null,
      timedOut: false,
      durationNs: Number(process.hrtime.bigint() - t0),
    };
  }
  const { child, reader } = spawned;
  const chunks = [];
  let kept = 0;
  reader.on('data', (d) => {
    if (kept < outputCap) {
      const piece = d.length > outputCap - kept ? d.subarray(0, outputCap - kept) : d;
      chunks.push(piece);
      kept += piece.length;
    } else if (kept === outputCap) {
      chunks.push(Buffer.from([0])); // one byte over the cap marks the overflow
      kept++;
    }
  });
  reader.resume();
  const eof = new Promise((resolve) => reader.once('close', resolve));
  let timedOut = false;
  let aborted = false;
  const exited = new Promise((resolve) => child.once('exit', (code, sig) => resolve({ code, sig })));
  const timer = timeoutMs ? setTimeout(() => {
    timedOut = true;
    killGroup(child.pid, 'SIGKILL');
  }, timeoutMs) : null;
  const onAbort = () => {
    aborted = true;
    killGroup(child.pid, 'SIGKILL');
  };
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  const { code, sig } = await exited;
  const durationNs = Number(process.hrtime.bigint() - t0);
  if (timer) clearTimeout(timer);
  signal.removeEventListener('abort', onAbort);
  // The command is over: end whatever is left of its process tree, then collect the output.
  killGroup(child.pid, 'SIGKILL');
  await Promise.race([eof, sleep(500)]);
  reader.destroy();
  if (aborted) throw cancelledError();
  return {
    output: Buffer.concat(chunks),
    exitCode: code === null ? null : code,
    signal: code === null ? signalName(sig) : null,
    timedOut,
    durationNs,
  };
}

// The retained tail of a process's combined output: exactly its last `retention` bytes are readable.
class OutputLog {
  constructor(retention) {
    this.retention = retention;
    this.chunks = [];
    this.start = 0; // stream offset of chunks[0]
    this.total = 0;
  }

  append(buf) {
    this.chunks.push(buf);
    this.total += buf.length;
    while (this.chunks.length > 1 && this.total - this.start - this.chunks[0].length >= this.retention) {
      this.start += this.chunks[0].length;
      this.chunks.shift();
    }
  }

  // Chunks are dropped whole, so a few bytes below this may still be held; none of them is readable.
  get retainedStart() {
    return Math.max(0, this.total - this.retention);
  }

  slice(from, to) {
    const parts = [];
    let pos = this.start;
    for (const c of this.chunks) {
      const cEnd = pos + c.length;
      if (cEnd > from && pos < to) parts.push(c.subarray(Math.max(0, from - pos), Math.min(c.length, to - pos)));
      pos = cEnd;
      if (pos >= to) break;
    }
    return Buffer.concat(parts);
  }
}

class ManagedProcess {
  constructor({ id, operationId, session, argv, cwd, retentionBytes }) {
    this.id = id;
    this.operationId = operationId;
    this.session = session;
    this.argv = argv;
    this.cwd = cwd;
    this.status = 'running';
    this.pid = null;
    this.exitCode = null;
    this.signal = null;
    this.startedAt = nowIso();
    this.startedHr = process.hrtime.bigint();
    this.endedAt = null;
    this.durationNs = null;
    this.log = new OutputLog(retentionBytes);
    this.readMark = 0; // the furthest EndOffset a process/read has answered
    this.outputTaken = () => {};
    this.child = null;
    this.stdinOpen = false;
    this.stopCause = null;
    this.listeners = new Set();
    this.timeoutTimer = null;
    this.finalized = new Promise((resolve) => {
      this.resolveFinalized = resolve;
    });
  }

  get running() {
    return this.status === 'running';
  }

  notify() {
    for (const fn of [...this.listeners]) fn();
  }

  // Whether one more chunk of output could push an unread byte out of the retention.
  outputFull() {
    return this.log.total - this.readMark > this.log.retention - READ_SLACK_BYTES;
  }

  record() {
    const r = { id: this.id };
    if (this.operationId !== undefined) r.operation_id = this.operationId;
    r.root_thread_id = this.session;
    r.argv = this.argv.slice();
    r.cwd = this.cwd;
    r.status = this.status;
    if (this.pid) r.pid = this.pid;
    r.exit_code = this.exitCode;
    r.signal = this.signal;
    r.started_at = this.startedAt;
    r.ended_at = this.endedAt;
    r.duration_ns = this.durationNs;
    r.output_bytes = this.log.total;
    return r;
  }
}

// Waits until `predicate()` holds (checked whenever the process reports news), `ms` elapses, or
// `signal` aborts. Resolves to true when the predicate held.
function waitFor(proc, predicate, ms, signal) {
  if (predicate()) return Promise.resolve(true);
  if (signal.aborted || ms <= 0) return Promise.resolve(false);
  return new Promise((resolve) => {
    const deadline = performance.now() + ms;
    let timer = null;
    const finish = (value) => {
      proc.listeners.delete(check);
      signal.removeEventListener('abort', onAbort);
      if (timer) clearTimeout(timer);
      resolve(value);
    };
    const check = () => {
      if (predicate()) finish(true);
    };
    const onAbort = () => finish(false);
    const arm = () => {
      const left = deadline - performance.now();
      if (left <= 0) return finish(predicate());
      timer = setTimeout(arm, Math.min(Math.ceil(left), TIMER_MAX_MS));
      return undefined;
    };
    proc.listeners.add(check);
    signal.addEventListener('abort', onAbort, { once: true });
    arm();
  });
}

export class ProcessRegistry {
  constructor({ session, emit, sockDir }) {
    this.session = session;
    this.emit = emit; // (Type, Cause, record) => void
    this.sockDir = sockDir;
    this.processes = new Map();
  }

  newId() {
    for (;;) {
      const id = `proc_${randomBytes(8).toString('hex')}`;
      if (!this.processes.has(id)) return id;
    }
  }

  lookup(id) {
    const proc = this.processes.get(id);
    if (!proc) throw new WorkerError('not_found', `no process ${id}`);
    return proc;
  }

  list() {
    return [...this.processes.values()].filter((p) => p.session === this.session).map((p) => p.record());
  }

  // cwd: the directory shown in the record; spawnCwd: the same directory with symlinks resolved.
  async start({ operationId, argv, cwd, spawnCwd, env, stdin, timeoutMs, retentionBytes, waitForReader }) {
    const proc = new ManagedProcess({
      id: this.newId(),
      operationId,
      session: this.session,
      argv,
      cwd,
      retentionBytes,
    });
    this.processes.set(proc.id, proc);
    const spawned = await spawnCombined(argv, { cwd: spawnCwd, env, stdin, sockDir: this.sockDir });
    if (spawned.error) {
      proc.status = 'failed';
      proc.endedAt = nowIso();
      proc.durationNs = Number(process.hrtime.bigint() - proc.startedHr);
      proc.failure = spawnFailureText(argv, spawned.error);
      proc.resolveFinalized();
      this.emit('failed', 'error', proc.record());
      return proc.record();
    }
    const { child, reader } = spawned;
    proc.child = child;
    proc.pid = child.pid;
    proc.stdinOpen = Boolean(stdin);
    if (child.stdin) child.stdin.on('error', () => {
      proc.stdinOpen = false;
    });
    reader.on('data', (d) => {
      proc.log.append(d);
      if (waitForReader && proc.outputFull()) reader.pause();
      proc.notify();
    });
    reader.resume();
    // A reader that waits for its host ends the output only once it has been read.
    proc.outputTaken = () => {
      if (waitForReader && reader.isPaused() && !proc.outputFull()) reader.resume();
    };
    let leaderExit = null;
    let outputEnded = false;
    let drainTimer = null;
    const finalize = () => {
      if (!proc.running) return;
      if (drainTimer) clearTimeout(drainTimer);
      if (proc.timeoutTimer) clearTimeout(proc.timeoutTimer);
      const { code, sig, at, hr } = leaderExit;
      proc.exitCode = code === null ? null : code;
      proc.signal = code === null ? signalName(sig) : null;
      proc.endedAt = at;
      proc.durationNs = Number(hr - proc.startedHr);
      proc.stdinOpen = false;
      let type;
      let cause;
      if (proc.stopCause) {
        type = 'stopped';
        cause = proc.stopCause;
        proc.status = 'stopped';
      } else {
        type = 'exited';
        cause = code === null ? 'signal' : 'exit';
        proc.status = 'exited';
      }
      this.emit(type, cause, proc.record());
      proc.resolveFinalized();
      proc.notify();
    };
    reader.once('end', () => {
      outputEnded = true;
      if (leaderExit) finalize();
    });
    reader.once('close', () => {
      outputEnded = true;
      if (leaderExit) finalize();
    });
    child.once('exit', (code, sig) => {
      leaderExit = { code, sig, at: nowIso(), hr: process.hrtime.bigint() };
      if (child.stdin) child.stdin.destroy();
      if (outputEnded) finalize();
      else if (!waitForReader) drainTimer = setTimeout(finalize, OUTPUT_DRAIN_MS);
    });
    this.emit('started', 'start', proc.record());
    if (timeoutMs) {
      proc.timeoutTimer = setTimeout(() => {
        if (!proc.running) return;
        if (!proc.stopCause) proc.stopCause = 'timeout';
        killGroup(proc.pid, 'SIGKILL');
      }, timeoutMs);
    }
    return proc.record();
  }

  async read(params, signal) {
    const t0 = process.hrtime.bigint();
    const proc = this.lookup(params.Process);
    const log = proc.log;
    const maxBytes = toNumber(params.MaxBytes ?? 65536);
    const requested = params.OffsetBytes ?? 0;
    let offset = toNumber(requested);
    const waitMs = toNumber(params.Wait ?? 0) / 1e6;
    const dwellMs = toNumber(params.MinDwell ?? 0) / 1e6;
    let truncated = false;
    let timedOut = false;
    const hasBytes = () => log.total > offset;
    if (!hasBytes() && proc.running && waitMs > 0) {
      const arrived = await waitFor(proc, () => hasBytes() || !proc.running, waitMs, signal);
      if (signal.aborted) throw cancelledError();
      if (!arrived && !hasBytes() && proc.running) timedOut = true;
    }
    if (hasBytes() && proc.running && dwellMs > 0) {
      await waitFor(proc, () => log.total - Math.max(offset, log.retainedStart) >= maxBytes || !proc.running, dwellMs, signal);
      if (signal.aborted) throw cancelledError();
    }
    if (offset < log.retainedStart) {
      truncated = true;
      offset = log.retainedStart;
    }
    const past = offset > log.total;
    const end = past ? offset : Math.min(log.total, offset + maxBytes);
    const bytes = end > offset ? log.slice(offset, end) : Buffer.alloc(0);
    if (!past) proc.readMark = Math.max(proc.readMark, end);
    proc.outputTaken();
    return {
      Process: proc.record(),
      Output: bytes.toString('base64'),
      StartOffset: past ? requested : offset,
      EndOffset: past ? requested : end,
      TotalBytes: log.total,
      Truncated: truncated,
      TimedOut: timedOut,
      Duration: Number(process.hrtime.bigint() - t0),
    };
  }

  async write(params, bytes, signal) {
    const proc = this.lookup(params.id);
    const stream = proc.child ? proc.child.stdin : null;
    if (!stream) throw new WorkerError('invalid_request', `process ${proc.id} was started without stdin`);
    if (!proc.stdinOpen || !proc.running || stream.destroyed || stream.writableEnded) {
      throw new WorkerError('invalid_request', `the stdin of process ${proc.id} is closed`);
    }
    if (bytes.length > 0) {
      await new Promise((resolve, reject) => {
        const onAbort = () => reject(cancelledError());
        signal.addEventListener('abort', onAbort, { once: true });
        stream.write(bytes, (err) => {
          signal.removeEventListener('abort', onAbort);
          if (err) reject(new WorkerError('invalid_request', `the stdin of process ${proc.id} is closed`));
          else resolve();
        });
      });
    }
    if (params.close) {
      proc.stdinOpen = false;
      stream.end();
    }
    return proc.record();
  }

  // Stops the process tree: `sig` first, KILL after graceMs for TERM. Resolves to the record once
  // the tree has ended (or `abortSignal` aborts the wait).
  async stop(proc, sig, graceMs, cause, abortSignal) {
    if (!proc.running) return proc.record();
    if (!proc.stopCause) proc.stopCause = cause;
    const pid = proc.pid;
    const t0 = performance.now();
    killGroup(pid, sig === 'KILL' ? 'SIGKILL' : 'SIGTERM');
    let killed = sig === 'KILL';
    const killTimer = killed ? null : setTimeout(() => {
      killed = true;
      killGroup(pid, 'SIGKILL');
    }, graceMs);
    const aborted = new Promise((resolve) => {
      if (abortSignal.aborted) resolve();
      else abortSignal.addEventListener('abort', resolve, { once: true });
    });
    await Promise.race([proc.finalized, aborted]);
    // The leader is gone; wait for the rest of its group.
    while (!abortSignal.aborted && groupAlive(pid)) {
      const elapsed = performance.now() - t0;
      if (!killed && elapsed >= graceMs) {
        killed = true;
        killGroup(pid, 'SIGKILL');
      }
      if (killed && elapsed >= graceMs + 1000) break;
      await Promise.race([sleep(TREE_POLL_MS), aborted]);
    }
    if (killTimer && !groupAlive(pid)) clearTimeout(killTimer);
    if (abortSignal.aborted) throw cancelledError();
    return proc.record();
  }

  // Cleanup: stop every owned process tree.
  async shutdown(graceMs) {
    const never = new AbortController().signal;
    const waits = [];
    for (const proc of this.processes.values()) {
      if (proc.running) waits.push(this.stop(proc, 'TERM', graceMs, 'shutdown', never).catch(() => {}));
      else if (proc.pid && groupAlive(proc.pid)) killGroup(proc.pid, 'SIGKILL');
    }
    await Promise.all(waits);
  }
}
