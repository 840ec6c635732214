// delegateExecutionBackendV4: an explicit peer client for a partial backend. It starts the peer command lazily
// at initialize; the peer must accept the same complete binding and grant the requested capabilities. It is
// never retried or replaced: once it fails, every call fails. Each call keeps its own cancellation: a
// cancelled call sends `cancel` to the peer and waits up to `delegate_cancel_wait_ms` for the peer's terminal
// reply before closing the unresponsive peer. The peer's `tool/invoke` callbacks go through the exact outer
// request's invokeTool; its process events go out on the outer connection. At close the peer gets EOF and
// `shutdown_grace_ms` (default `delegate_shutdown_grace_ms`) to exit before it is killed.
//
//   const peer = delegateExecutionBackendV4({ command: ['node', '/abs/peer.mjs'], capabilities: ['process.start.v1'] });
//   await runExecutionBackendV4({ ...peer, methods: { ...peer.methods, async execute(request, context) {
//     audit(request);
//     return peer.methods.execute(request, context);
//   } } });

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';

import { WORKER_CONSTANTS, WORKER_METHODS } from '../../../generated/node/schemas.mjs';
import { WorkerError } from './errors.mjs';
import { parse, plain, stringify } from './json.mjs';

const MAX_GRACE_MS = 2_147_483_647;

/** A backend that forwards every method to the peer worker `command` ([program, ...arguments]). */
export function delegateExecutionBackendV4({ command, capabilities = [], env, shutdown_grace_ms } = {}) {
  if (!Array.isArray(command) || command.length === 0 || command.some((part) => typeof part !== 'string')) {
    throw new TypeError('command: the peer program and its arguments, as strings');
  }
  if (shutdown_grace_ms !== undefined && !(Number.isInteger(shutdown_grace_ms) && shutdown_grace_ms >= 1 && shutdown_grace_ms <= MAX_GRACE_MS)) {
    throw new RangeError(`shutdown_grace_ms: an integer from 1 to ${MAX_GRACE_MS}`);
  }
  const peer = new Peer(command, env, shutdown_grace_ms ?? WORKER_CONSTANTS.delegate_shutdown_grace_ms);
  const methods = {};
  for (const [name, spec] of Object.entries(WORKER_METHODS)) {
    if (spec.direction !== 'host_to_worker' || name === 'initialize' || name === 'cancel') continue;
    const forward = (params, context) => peer.call(name, params, context);
    forward.available = () => peer.methods.has(name);
    methods[name] = forward;
  }
  return {
    initialize: (binding, context) => peer.initialize(binding, context),
    methods,
    close: () => peer.close(),
    capabilities: [...capabilities],
    info: { name: 'wuu-node-delegate', version: '0.1.0' },
  };
}

class Peer {
  constructor(command, env, graceMs) {
    this.command = command;
    this.env = env;
    this.graceMs = graceMs;
    this.token = randomBytes(16).toString('hex');
    this.methods = new Set();
    this.pending = new Map();
    this.parents = new Map();
    this.nextId = 1;
    this.failure = null;
    this.child = null;
  }

  async initialize(binding, context) {
    this.outer = context;
    const child = spawn(this.command[0], this.command.slice(1), {
      env: this.env ?? process.env,
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
    child.once('error', (error) => this.fail(`the peer could not start: ${error.message}`));
    child.stdin.on('error', () => {}); // a peer that is gone: its exit says so
    this.readFrames(child.stdout);
    const result = await this.call('initialize', binding, context);
    if (result.version !== WORKER_CONSTANTS.protocol_version) {
      throw new WorkerError('protocol_mismatch', this.fail(`the peer speaks version ${result.version}`));
    }
    const missing = (binding.capabilities ?? []).filter((name) => !(result.capabilities ?? []).includes(name));
    if (missing.length) throw new WorkerError('internal', this.fail(`the peer does not grant ${JSON.stringify(missing)}`));
    this.methods = new Set(result.methods);
  }

  // The peer's frames, a line each and at most the protocol's frame limit; anything else fails the peer.
  readFrames(stdout) {
    let buffered = '';
    stdout.setEncoding('utf8');
    stdout.on('data', (chunk) => {
      buffered += chunk;
      let start = 0;
      let newline;
      while (this.failure === null && (newline = buffered.indexOf('\n', start)) >= 0) {
        const line = buffered.slice(start, newline);
        start = newline + 1;
        let frame;
        try {
          frame = parse(line);
        } catch (error) {
          this.fail(`the peer sent a malformed frame: ${error.message}`);
          return;
        }
        this.route(frame);
      }
      buffered = buffered.slice(start);
      if (Buffer.byteLength(buffered) >= WORKER_CONSTANTS.max_frame_bytes) this.fail('the peer sent a frame over the limit');
    });
    stdout.once('end', () => {
      if (this.closing) this.settleAll('the peer closed its output');
      else this.fail('the peer closed its output');
    });
  }

  route(frame) {
    if (frame.method === 'process/event' && !('id' in frame)) {
      this.outer?.emitProcess(plain(frame.data));
    } else if (frame.method === 'tool/invoke') {
      this.callback(frame);
    } else if (typeof frame.id === 'string' && this.pending.has(frame.id)) {
      const settle = this.pending.get(frame.id);
      this.pending.delete(frame.id);
      settle(frame);
    }
  }

  // The peer's tool/invoke, passed up as a callback of the outer request it serves.
  async callback(frame) {
    const outer = this.parents.get(frame.parent);
    let reply;
    if (!outer) {
      reply = { id: frame.id, error: `parent_not_live: ${frame.parent}` };
    } else {
      try {
        const data = await outer.invokeTool(frame.data?.tool, parse(frame.data?.arguments ?? 'null'));
        reply = { id: frame.id, data };
      } catch (error) {
        reply = { id: frame.id, error: error instanceof WorkerError ? error.wire : `internal: ${error?.message ?? error}` };
      }
    }
    this.write(reply);
  }

  write(frame) {
    if (this.child && !this.child.stdin.destroyed) this.child.stdin.write(`${stringify(frame)}\n`);
  }

  // Forward one request; the peer's result data, or its error as a WorkerError.
  async call(method, params, context) {
    if (this.failure !== null || this.child === null) {
      throw new WorkerError('internal', `the delegate peer has failed: ${this.failure}`);
    }
    const id = `d-${this.nextId++}`;
    this.parents.set(id, context);
    const answered = new Promise((resolve) => this.pending.set(id, resolve));
    const onAbort = () => this.cancel(id, answered);
    context.signal.addEventListener('abort', onAbort, { once: true });
    try {
      this.write({ id, method, token: this.token, data: params });
      const reply = await answered;
      if (reply.lost !== undefined) throw new WorkerError('internal', `the delegate peer was lost: ${reply.lost}`);
      if ('error' in reply) throw WorkerError.fromWire(String(reply.error));
      return plain(reply.data);
    } finally {
      context.signal.removeEventListener('abort', onAbort);
      this.parents.delete(id);
      this.pending.delete(id);
    }
  }

  // Cancel the peer's request and wait for its terminal reply, closing an unresponsive peer.
  cancel(id, answered) {
    if (!this.pending.has(id)) return;
    this.write({ id: `${id}-cancel`, method: 'cancel', token: this.token, data: { id } });
    const timer = setTimeout(() => {
      this.fail('the peer did not answer a cancelled request in time');
    }, WORKER_CONSTANTS.delegate_cancel_wait_ms);
    answered.finally(() => clearTimeout(timer));
  }

  // A terminal transport failure closes the peer at once; it is never retried. Returns the reason.
  fail(reason) {
    if (this.failure === null) {
      this.failure = reason;
      this.settleAll(reason);
      if (this.child && this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    }
    return this.failure;
  }

  settleAll(reason) {
    for (const [id, settle] of this.pending) settle({ id, lost: reason });
    this.pending.clear();
  }

  async close() {
    if (this.child === null) return;
    this.closing = true;
    this.child.stdin.end();
    let timer;
    const deadline = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), this.graceMs);
    });
    let outcome = await Promise.race([this.exited, deadline]);
    clearTimeout(timer);
    const failed = this.failure;
    if (outcome === null) {
      this.child.kill('SIGKILL');
      outcome = await this.exited;
      if (failed === null) throw new Error('the delegate peer was killed after its exit budget; its resources may remain');
    }
    if (failed === null && outcome.code !== 0) {
      throw new Error(`the delegate peer exited with ${outcome.code ?? outcome.signal}; its resources may remain`);
    }
  }
}
