// runExecutionBackendV4: serves a provider on this process's stdio as a v4 execution worker
// (spec/methods/worker.json, spec/schema/worker/*.schema.json). The SDK owns the framing, the token and the
// binding, the validation of every frame against the spec, overlapping requests, cancellation with drain and
// the `tool/invoke` callbacks; the provider owns initialize, its methods map and close.
//
// A backend is { initialize(binding, context), methods: { [method]: (params, context) => result }, close(),
// capabilities?: string[], info?: { name, version } }. A method it omits is answered `unsupported_method`,
// never substituted. `process.start.v1` is granted only to a backend with both `process/start` and
// `process/list` among its methods, and `close`; a start reply that loses the host's `operation_id` is an
// `internal` error.
// A handler's result is checked against the method's result def: a provider's bug becomes an `internal`
// reply, never a frame off the spec. A handler's context: { id, method, binding, signal, lifetimeSignal,
// grantedCapabilities, emitProcess(event), invokeTool(tool, arguments) }; `signal` aborts with its request
// (cancel, or the connection's end), `lifetimeSignal` with the connection, and `invokeTool` works only while
// the request is live.
//
// `toolArguments(request)` decodes and checks an `execute` request's arguments against the core tool's def.
//
// The connection ends at EOF, at a malformed frame (no reply), at an output failure and at SIGTERM, SIGINT or
// SIGHUP: every handler's
// signal aborts, the SDK waits for all of them, then runs `close` and exits (0; 1 if close failed or the
// output failed).

import { SCHEMAS, WORKER_CONSTANTS, WORKER_METHODS, WORKER_TOOLS } from '../../../generated/node/schemas.mjs';
import { oneLine, WorkerError } from './errors.mjs';
import { JsonSyntaxError, parse, plain, stringify } from './json.mjs';
import { canonical, errors, fieldPath } from './validate.mjs';

const MAX_FRAME = WORKER_CONSTANTS.max_frame_bytes;
const MAX_ID = WORKER_CONSTANTS.max_id_bytes;
const VERSION = WORKER_CONSTANTS.protocol_version;
const START_CAPABILITY = 'process.start.v1';
const START_METHODS = ['process/start', 'process/list'];
const REQUEST_KEYS = new Set(['id', 'method', 'token', 'data']);
const DEFAULT_INFO = { name: 'wuu-node-sdk', version: '0.1.0' };

/** Serve `backend` until the connection ends; resolves with the process's exit code once cleanup is done. */
export async function runExecutionBackendV4(backend, { input = process.stdin, output = process.stdout } = {}) {
  const connection = new Connection(backend, output);
  const code = await connection.serve(input);
  process.exitCode = code;
  return code;
}

/** `data` checked against def `name`, its defaults applied; else a WorkerError `code` naming the field, its
path under `root` (the dotted path of `data` itself, when it is a field of something larger), after `what`. */
export function checked(name, data, code = 'invalid_request', what = '', root = '') {
  const [first] = errors(name, data);
  if (first) {
    const field = fieldPath(first);
    const where = root && field ? `${root}.${field}` : root || field || 'data';
    throw new WorkerError(code, `${what}${where}: ${first.reason}`);
  }
  return withDefaults(SCHEMAS[name], plain(data));
}

/** The arguments of an `execute` request, decoded from `call.arguments` and checked against the core tool's
arguments def (unsupported_tool for a tool the spec does not name; invalid_request naming the field). */
export function toolArguments(request) {
  const tool = WORKER_TOOLS[request.tool];
  if (!tool) throw new WorkerError('unsupported_tool', `${request.tool} is not a core tool`);
  let args;
  try {
    args = parse(request.call.arguments);
  } catch (error) {
    throw new WorkerError('invalid_request', `call.arguments: not JSON: ${error.message}`);
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw new WorkerError('invalid_request', 'call.arguments: not a JSON object');
  }
  return checked(tool.arguments, args, 'invalid_request', '', 'call.arguments');
}

function withDefaults(schema, value) {
  if (!schema.properties || value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  for (const [key, property] of Object.entries(schema.properties)) {
    if (!(key in value) && 'default' in property) value[key] = structuredClone(property.default);
  }
  return value;
}

// The binding's value for comparison: defaults applied, omitted maps and lists empty, capabilities a set.
function bindingKey(binding) {
  const key = { ...binding };
  key.identity ??= {};
  key.environment ??= {};
  key.file_roots ??= [];
  key.capabilities = [...new Set(binding.capabilities ?? [])].sort();
  return canonical(key);
}

class Connection {
  constructor(backend, output) {
    this.backend = backend;
    this.output = output;
    this.state = 'new'; // new | initializing | ready | dead
    this.token = null;
    this.binding = null;
    this.initReply = null;
    this.routes = new Map();
    this.granted = new Set();
    this.inflight = new Map();
    this.callbacks = new Map();
    this.nextCallback = 1;
    this.lifetime = new AbortController();
    this.outputFailed = false;
    this.ended = false;
  }

  // --- input ----------------------------------------------------------------------------------------------

  async serve(input) {
    const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }); // a BOM is not JSON: malformed
    let pending = [];
    let size = 0;
    const ending = new Promise((resolve) => {
      this.endConnection = resolve;
    });
    const onData = (chunk) => {
      let start = 0;
      for (;;) {
        const newline = chunk.indexOf(10, start);
        const piece = newline < 0 ? chunk.subarray(start) : chunk.subarray(start, newline);
        size += piece.length + (newline < 0 ? 0 : 1);
        if (size > MAX_FRAME) return this.end('malformed frame: over the frame limit');
        if (newline < 0) {
          if (piece.length) pending.push(piece);
          return undefined;
        }
        pending.push(piece);
        const line = Buffer.concat(pending);
        pending = [];
        size = 0;
        start = newline + 1;
        const problem = this.frame(line, decoder);
        if (problem) return this.end(`malformed frame: ${problem}`);
        if (this.ended) return undefined;
      }
    };
    input.on('data', onData);
    input.once('end', () => this.end(size > 0 ? 'malformed frame: an unterminated last line' : 'end of input'));
    input.once('error', () => this.end('input failed'));
    // A stop signal ends the connection as EOF does: drain, close, exit.
    const signals = ['SIGTERM', 'SIGINT', 'SIGHUP'].map((name) => [name, () => this.end(name)]);
    for (const [name, handler] of signals) process.on(name, handler);
    this.output.on('error', () => {
      this.outputFailed = true;
      this.end('output failed');
    });
    await ending;
    for (const [name, handler] of signals) process.off(name, handler);
    input.off('data', onData);
    input.destroy(); // what follows a malformed frame is never read, and an open input must not keep us alive
    return this.shutdown();
  }

  end(reason) {
    if (this.ended) return;
    this.ended = true;
    this.endReason = reason;
    this.endConnection();
  }

  // One frame; why it is malformed, or undefined.
  frame(line, decoder) {
    let frame;
    try {
      frame = parse(decoder.decode(line));
    } catch (error) {
      if (error instanceof JsonSyntaxError || error instanceof TypeError) return `not JSON: ${error.message}`;
      throw error;
    }
    if (frame === null || typeof frame !== 'object' || Array.isArray(frame)) return 'not a JSON object';
    if ('method' in frame && typeof frame.method !== 'string') return 'method is not a string';
    if (typeof frame.id !== 'string' || frame.id === '') return 'no string id'; // a host sends no notification
    if (Buffer.byteLength(frame.id) > MAX_ID) return `id over ${MAX_ID} bytes`;
    if (frame.method === undefined) {
      if ('token' in frame || 'parent' in frame) return 'a request without a method';
      this.reply(frame);
      return undefined;
    }
    try {
      this.request(frame.id, frame.method, frame);
    } catch (error) {
      if (!(error instanceof WorkerError)) throw error;
      this.send({ id: frame.id, error: error.wire });
    }
    return undefined;
  }

  reply(frame) {
    const waiter = this.callbacks.get(frame.id);
    if (!waiter) return; // a reply to a callback that has given up
    this.callbacks.delete(frame.id);
    waiter(frame);
  }

  request(id, method, frame) {
    if (this.inflight.has(id)) throw new WorkerError('invalid_request', `request id ${JSON.stringify(id)} is already in flight`);
    const extra = Object.keys(frame).filter((key) => !REQUEST_KEYS.has(key)).sort();
    if (extra.length) throw new WorkerError('invalid_request', `unknown frame field ${JSON.stringify(extra[0])}`);
    const { token, data } = frame;
    if (typeof token !== 'string') throw new WorkerError('invalid_request', 'token: a request carries a string token');
    if (data === null || typeof data !== 'object' || Array.isArray(data)) {
      throw new WorkerError('invalid_request', 'data: a request carries an object');
    }
    if (this.state === 'dead') throw new WorkerError('initialization_failed', 'an earlier initialize failed; reconnect');
    if (method === 'initialize') return this.initialize(id, token, data);
    if (method === 'cancel') return this.cancel(id, token, data);
    if (this.state !== 'ready') throw new WorkerError('not_initialized', `${method} before initialize`);
    this.checkToken(token);
    const route = this.routes.get(method);
    if (!route) throw new WorkerError('unsupported_method', method);
    const params = checked(WORKER_METHODS[method].params, data);
    return this.start(id, method, (context) => route(params, context), (result) => this.resultData(method, params, result));
  }

  checkToken(token) {
    if (token !== this.token) throw new WorkerError('token_mismatch', 'the token differs from the pinned one');
  }

  initialize(id, token, data) {
    if (this.state === 'initializing') throw new WorkerError('invalid_request', 'initialize is already in progress');
    const params = checked('InitializeParams', data);
    if (this.state === 'ready') {
      this.checkToken(token);
      if (bindingKey(params) !== bindingKey(this.binding)) {
        throw new WorkerError('binding_immutable', 'initialize data differs from the pinned binding');
      }
      this.send({ id, data: this.initReply });
      return;
    }
    if (params.version !== VERSION) {
      throw new WorkerError('protocol_mismatch', `version ${params.version}; this worker speaks ${VERSION}`);
    }
    this.state = 'initializing';
    this.token = token;
    this.pendingBinding = params;
    this.start(id, 'initialize', (context) => this.backend.initialize(params, context), () => this.initialized(params));
  }

  initialized(params) {
    const available = Object.entries(this.backend.methods ?? {}).filter(
      ([, handler]) => typeof handler === 'function' && (typeof handler.available !== 'function' || handler.available()),
    );
    for (const [name, handler] of available) {
      const spec = WORKER_METHODS[name];
      if (spec && spec.direction === 'host_to_worker' && name !== 'initialize' && name !== 'cancel') {
        this.routes.set(name, handler);
      }
    }
    const honoured = new Set(this.backend.capabilities ?? []);
    const canStart = START_METHODS.every((name) => this.routes.has(name)) && typeof this.backend.close === 'function';
    if (!canStart) honoured.delete(START_CAPABILITY);
    this.granted = new Set((params.capabilities ?? []).filter((name) => honoured.has(name)));
    const reply = {
      version: VERSION,
      capabilities: [...this.granted].sort(),
      methods: [...new Set(['initialize', 'cancel', ...available.map(([name]) => name)])].sort(),
      worker: this.backend.info ?? DEFAULT_INFO,
    };
    checked('InitializeResult', reply, 'internal', 'initialize result: ');
    this.binding = params;
    this.initReply = reply;
    this.state = 'ready';
    return reply;
  }

  cancel(id, token, data) {
    if (this.state === 'new') throw new WorkerError('not_initialized', 'cancel before initialize');
    this.checkToken(token);
    const params = checked('CancelParams', data);
    const target = this.inflight.get(params.id);
    const cancelled = target !== undefined && !target.done;
    if (cancelled) target.controller.abort(new WorkerError('cancelled'));
    this.send({ id, data: { cancelled } });
  }

  // --- handlers ---------------------------------------------------------------------------------------------

  // Run a request's work; `shape` turns its result into the reply's data. Exactly one terminal reply is sent.
  start(id, method, work, shape) {
    const request = { id, method, controller: new AbortController(), done: false };
    this.inflight.set(id, request);
    const context = this.context(request);
    request.promise = (async () => {
      let reply;
      try {
        const data = shape(await work(context));
        reply = { id, data };
      } catch (error) {
        reply = this.failure(request, error);
      }
      if (method === 'initialize' && this.state === 'initializing' && 'error' in reply) this.state = 'dead';
      request.done = true;
      request.controller.abort(new WorkerError('cancelled', 'the request has ended'));
      this.inflight.delete(id);
      this.send(reply);
    })();
  }

  failure(request, error) {
    if (request.controller.signal.aborted) return { id: request.id, error: 'cancelled' };
    if (error instanceof WorkerError) return { id: request.id, error: error.wire };
    process.stderr.write(`wuu-node-sdk: ${request.method} ${request.id} failed: ${error?.stack ?? error}\n`);
    return { id: request.id, error: oneLine(`internal: ${error?.name ?? 'Error'}: ${error?.message ?? error}`) };
  }

  resultData(method, params, result) {
    const spec = WORKER_METHODS[method];
    if (method === 'process/start' && this.granted.has(START_CAPABILITY) && result?.operation_id !== params.operation_id) {
      throw new WorkerError('internal', `${START_CAPABILITY}: the start reply lost the operation_id`);
    }
    checked(spec.result, result, 'internal', `${method} result: `);
    return result;
  }

  context(request) {
    const connection = this;
    return {
      id: request.id,
      method: request.method,
      get binding() {
        return connection.binding ?? connection.pendingBinding;
      },
      signal: request.controller.signal,
      lifetimeSignal: this.lifetime.signal,
      get grantedCapabilities() {
        return new Set(connection.granted);
      },
      emitProcess: (event) => this.emitProcess(event),
      invokeTool: (tool, args) => this.invokeTool(request, tool, args),
    };
  }

  emitProcess(event) {
    checked('ProcessEvent', event, 'internal', 'process/event: ');
    if (!this.ended || this.draining) this.send({ method: 'process/event', data: event });
  }

  async invokeTool(request, tool, args) {
    if (request.done || request.controller.signal.aborted) {
      throw new WorkerError('parent_not_live', `request ${request.id} has ended`);
    }
    const params = checked('ToolInvokeParams', { tool, arguments: stringify(args) }, 'invalid_request', 'tool/invoke: ');
    const id = `cb-${this.nextCallback++}`;
    // The callback ends with its request: a cancel (or the connection's end) stops the wait for the host.
    const signal = request.controller.signal;
    let stop;
    const reply = await new Promise((resolve, reject) => {
      stop = () => {
        this.callbacks.delete(id);
        reject(signal.reason instanceof WorkerError ? signal.reason : new WorkerError('cancelled'));
      };
      this.callbacks.set(id, resolve);
      signal.addEventListener('abort', stop, { once: true });
      this.send({ id, method: 'tool/invoke', parent: request.id, data: params });
    }).finally(() => signal.removeEventListener('abort', stop));
    const keys = Object.keys(reply).sort().join(',');
    if (keys === 'error,id' && typeof reply.error === 'string') throw WorkerError.fromWire(reply.error);
    if (keys !== 'data,id') throw new WorkerError('internal', "the host's reply to tool/invoke is neither data nor error");
    return checked('ToolResult', reply.data, 'internal', 'tool/invoke reply: ');
  }

  // --- output -----------------------------------------------------------------------------------------------

  send(frame) {
    if (this.outputFailed) return;
    let text = `${stringify(frame)}\n`;
    if (Buffer.byteLength(text) > MAX_FRAME) {
      if (!('id' in frame) || 'method' in frame) {
        process.stderr.write(`wuu-node-sdk: dropped a frame over the frame limit (${frame.method})\n`);
        return;
      }
      text = `${stringify({ id: frame.id, error: `reply_too_large: the reply is over ${MAX_FRAME} bytes` })}\n`;
    }
    this.output.write(text);
  }

  // --- the end ----------------------------------------------------------------------------------------------

  async shutdown() {
    this.draining = true;
    for (const request of this.inflight.values()) request.controller.abort(new WorkerError('cancelled', this.endReason));
    await Promise.allSettled([...this.inflight.values()].map((request) => request.promise));
    this.lifetime.abort(new WorkerError('cancelled', this.endReason));
    this.draining = false;
    let code = this.outputFailed ? 1 : 0;
    try {
      await this.backend.close?.();
    } catch (error) {
      process.stderr.write(`wuu-node-sdk: close failed: ${error?.stack ?? error}\n`);
      code = 1;
    }
    if (!this.outputFailed) await new Promise((resolve) => this.output.write('', resolve));
    return code;
  }
}
