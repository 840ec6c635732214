#!/usr/bin/env node
// An independent Node.js implementation of the Wuu v4 execution-worker protocol, written from
// spec/ alone (see README.md). Frames are newline-delimited JSON on stdin/stdout.

import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ExportStore } from './exports.mjs';
import { parseJson, toJson } from './json.mjs';
import { PathContext, sensitiveHomes } from './paths.mjs';
import { cancelledError, DEFAULT_OUTPUT_RETENTION_BYTES, MINIMAL_PATH, ProcessRegistry } from './processes.mjs';
import * as schemas from './schemas.mjs';
import { commandCwd, refuseConfinedCommand, TOOLS } from './tools.mjs';
import { decodeBase64, WorkerError } from './validate.mjs';

const PROTOCOL_VERSION = 4;
const MAX_FRAME_BYTES = 16777216;
const MAX_ID_BYTES = 256;
const SHUTDOWN_GRACE_MS = 2000;
const WORKER_INFO = { name: 'wuu-node-example-worker', version: '0.1.0' };
const METHODS = [
  'initialize',
  'cancel',
  'execute',
  'process/start',
  'process/list',
  'process/get',
  'process/read',
  'process/stop',
  'process/write',
  'export/open',
  'export/read',
  'export/close',
];
const METHOD_SET = new Set(METHODS);
const SUPPORTED_CAPABILITIES = new Set(['process.start.v1']);
const FRAME_KEYS = new Set(['id', 'method', 'token', 'data']);

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const fail = (code, message) => new WorkerError(code, message);

// ---- connection state ------------------------------------------------------------------------

let state = 'new'; // new | ready | dead
let pinnedToken = null;
let binding = null; // the normalized binding
let initReply = null;
let initChain = Promise.resolve();
let initInFlight = 0;
let ctx = null; // tool context, set by initialize
let registry = null;
let exportStore = null;
const inflight = new Map(); // request id -> {controller, done}
let shuttingDown = false;
let outputFailed = false;

const workerTmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wuu-node-worker-'));
const sockDir = fs.mkdtempSync(path.join(workerTmp, 's'));
const homes = sensitiveHomes();

// ---- output ----------------------------------------------------------------------------------

const out = process.stdout;
out.on('error', () => {
  outputFailed = true;
  shutdown(1);
});

function writeLine(text) {
  if (outputFailed) return;
  try {
    out.write(`${text}\n`);
  } catch {
    outputFailed = true;
    shutdown(1);
  }
}

const oneLine = (s) => s.replace(/[\r\n\u2028\u2029]/g, ' ');

function errorString(err) {
  if (err instanceof WorkerError) return oneLine(err.message);
  return oneLine(`internal: ${err && err.message ? err.message : String(err)}`);
}

function sendReply(id, data) {
  const text = toJson({ id, data });
  if (Buffer.byteLength(text, 'utf8') + 1 > MAX_FRAME_BYTES) {
    writeLine(toJson({ id, error: 'reply_too_large: the reply would exceed 16777216 bytes' }));
  } else {
    writeLine(text);
  }
}

function sendError(id, err) {
  if (!(err instanceof WorkerError)) process.stderr.write(`worker: internal error: ${err && err.stack ? err.stack : err}\n`);
  writeLine(toJson({ id, error: errorString(err) }));
}

function emitProcessEvent(type, cause, record) {
  writeLine(toJson({ method: 'process/event', data: { Type: type, Cause: cause, Process: record } }));
}

// ---- input -----------------------------------------------------------------------------------

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
let pending = [];
let pendingBytes = 0;

process.stdin.on('data', (chunk) => {
  let start = 0;
  while (!shuttingDown) {
    const nl = chunk.indexOf(0x0a, start);
    if (nl < 0) {
      const rest = chunk.subarray(start);
      pendingBytes += rest.length;
      if (pendingBytes + 1 > MAX_FRAME_BYTES) return malformed('a frame exceeds 16777216 bytes');
      if (rest.length > 0) pending.push(rest);
      return undefined;
    }
    const piece = chunk.subarray(start, nl);
    if (pendingBytes + piece.length + 1 > MAX_FRAME_BYTES) return malformed('a frame exceeds 16777216 bytes');
    const line = pending.length > 0 ? Buffer.concat([...pending, piece]) : piece;
    pending = [];
    pendingBytes = 0;
    onFrame(line);
    start = nl + 1;
  }
  return undefined;
});
process.stdin.on('end', () => {
  if (pendingBytes > 0) malformed('the input ended inside a frame');
  else shutdown(0);
});
process.stdin.on('error', () => shutdown(0));

function malformed(why) {
  process.stderr.write(`worker: malformed frame (${why}); closing the connection\n`);
  shutdown(0);
}

function onFrame(bytes) {
  let frame;
  try {
    frame = parseJson(decoder.decode(bytes));
  } catch (e) {
    return malformed(e instanceof RangeError ? 'too deeply nested' : `not UTF-8 JSON: ${e.message}`);
  }
  if (!isObject(frame)) return malformed('not a JSON object');
  if (typeof frame.id !== 'string' || typeof frame.method !== 'string') return malformed('no string id and method');
  const idBytes = Buffer.byteLength(frame.id, 'utf8');
  if (idBytes < 1 || idBytes > MAX_ID_BYTES) return malformed('the id is not 1 to 256 UTF-8 bytes');
  try {
    dispatch(frame);
  } catch (e) {
    sendError(frame.id, e);
  }
  return undefined;
}

// ---- dispatch --------------------------------------------------------------------------------

function dispatch(frame) {
  const { id, method } = frame;
  if (inflight.has(id)) throw fail('invalid_request', `id: ${JSON.stringify(id)} is already in flight`);
  for (const key of Object.keys(frame)) {
    if (!FRAME_KEYS.has(key)) throw fail('invalid_request', `${key}: unknown frame field`);
  }
  if (!Object.hasOwn(frame, 'token')) throw fail('invalid_request', 'token: missing required field');
  if (typeof frame.token !== 'string') throw fail('invalid_request', 'token: must be a string');
  if (!Object.hasOwn(frame, 'data')) throw fail('invalid_request', 'data: missing required field');
  if (!isObject(frame.data)) throw fail('invalid_request', 'data: must be an object');
  if (method.length === 0) throw fail('invalid_request', 'method: must not be empty');
  if (state === 'dead') throw fail('initialization_failed', 'an earlier initialize failed; open a new connection');

  if (method === 'initialize') {
    startHandler(id, (signal) => initialize(frame, signal));
    return;
  }
  if (state !== 'ready') {
    // A cancel may address an initialize that is still in flight.
    if (method === 'cancel' && initInFlight > 0) {
      sendReply(id, cancel(frame.data));
      return;
    }
    throw fail('not_initialized', 'initialize first');
  }
  if (frame.token !== pinnedToken) throw fail('token_mismatch', 'the token differs from the pinned one');
  if (!METHOD_SET.has(method)) throw fail('unsupported_method', `${method} is not implemented by this worker`);
  if (method === 'cancel') {
    sendReply(id, cancel(frame.data));
    return;
  }
  const handler = HANDLERS[method];
  startHandler(id, (signal) => handler(frame.data, signal));
}

function startHandler(id, fn) {
  const controller = new AbortController();
  const entry = { controller, done: null };
  inflight.set(id, entry);
  entry.done = (async () => {
    let result;
    let error = null;
    try {
      result = await fn(controller.signal);
    } catch (e) {
      error = e;
    }
    inflight.delete(id);
    if (error === null) sendReply(id, result);
    else if (controller.signal.aborted) sendError(id, cancelledError());
    else sendError(id, error);
  })();
}

function cancel(data) {
  const params = schemas.CancelParams(data, '');
  const entry = inflight.get(params.id);
  if (!entry) return { cancelled: false };
  entry.controller.abort();
  return { cancelled: true };
}

// ---- initialize ------------------------------------------------------------------------------

function normalizeBinding(p) {
  return {
    version: p.version,
    root: p.root,
    session: p.session,
    identity: p.identity ?? {},
    environment: p.environment ?? {},
    require_existing_workspace: p.require_existing_workspace ?? false,
    remove_workspace_on_exit: p.remove_workspace_on_exit ?? false,
    capabilities: [...(p.capabilities ?? [])].sort(),
    file_roots: (p.file_roots ?? []).map((r) => ({ path: r.path, kind: r.kind })),
    // This worker has no OS sandbox: its confined commands get sandbox_unavailable, whatever the policy.
    command_network: p.command_network ?? 'unrestricted',
  };
}

function sameMap(a, b) {
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

function sameBinding(a, b) {
  return (
    a.version === b.version &&
    a.root === b.root &&
    a.session === b.session &&
    sameMap(a.identity, b.identity) &&
    sameMap(a.environment, b.environment) &&
    a.require_existing_workspace === b.require_existing_workspace &&
    a.remove_workspace_on_exit === b.remove_workspace_on_exit &&
    a.capabilities.length === b.capabilities.length &&
    a.capabilities.every((c, i) => c === b.capabilities[i]) &&
    JSON.stringify(a.file_roots) === JSON.stringify(b.file_roots) &&
    a.command_network === b.command_network
  );
}

async function initialize(frame, signal) {
  initInFlight++;
  const previous = initChain;
  let release;
  initChain = new Promise((resolve) => {
    release = resolve;
  });
  try {
    await previous;
    return await runInitialize(frame, signal);
  } finally {
    initInFlight--;
    release();
  }
}

// A directory of the binding (`field` names it): its real path, made (with its parents) unless it `must`
// exist already.
async function bindDirectory(lex, field, must) {
  let st = null;
  try {
    st = await fsp.stat(lex);
  } catch (e) {
    if (e.code !== 'ENOENT' && e.code !== 'ENOTDIR') throw e;
  }
  if (!st) {
    if (must) throw fail('workspace_missing', `${field}: ${lex} does not exist`);
    await fsp.mkdir(lex, { recursive: true });
  } else if (!st.isDirectory()) {
    throw fail('workspace_missing', `${field}: ${lex} is not a directory`);
  }
  return fsp.realpath(lex);
}

async function runInitialize(frame, signal) {
  if (state === 'dead') throw fail('initialization_failed', 'an earlier initialize failed; open a new connection');
  if (state === 'ready') {
    if (frame.token !== pinnedToken) throw fail('token_mismatch', 'the token differs from the pinned one');
    const params = schemas.InitializeParams(frame.data, '');
    if (params.version !== PROTOCOL_VERSION) throw fail('protocol_mismatch', `version ${params.version} is not 4`);
    if (!sameBinding(normalizeBinding(params), binding)) throw fail('binding_immutable', 'the binding differs from the pinned one');
    return initReply;
  }
  if (signal.aborted) throw cancelledError();
  const params = schemas.InitializeParams(frame.data, '');
  if (params.version !== PROTOCOL_VERSION) throw fail('protocol_mismatch', `version ${params.version} is not 4`);
  // From here on, a failure or a cancellation leaves the connection dead.
  try {
    const normalized = normalizeBinding(params);
    const wuuHomes = normalized.file_roots.filter((r) => r.kind === 'wuu_home');
    if (wuuHomes.length > 1) throw fail('invalid_request', 'file_roots: a second wuu_home (at most one)');
    const must = normalized.require_existing_workspace;
    const rootLex = path.posix.resolve(params.root);
    const rootReal = await bindDirectory(rootLex, 'root', must);
    const fileRoots = [];
    for (const [index, r] of normalized.file_roots.entries()) {
      const lex = path.posix.resolve(r.path);
      fileRoots.push(new PathContext(lex, await bindDirectory(lex, `file_roots.${index}.path`, must)));
    }
    if (signal.aborted) throw cancelledError();
    const paths = new PathContext(rootLex, rootReal, fileRoots);
    registry = new ProcessRegistry({ session: params.session, emit: emitProcessEvent, sockDir });
    exportStore = new ExportStore(await fsp.mkdtemp(path.join(workerTmp, 'exports-')));
    ctx = {
      paths,
      homes: wuuHomes.length > 0 ? { ...homes, wuu: [homes.wuu, path.posix.resolve(wuuHomes[0].path)] } : homes,
      sockDir,
      privateTempDir: () => fsp.mkdtemp(path.join(workerTmp, 'tmp-')),
      commandEnv: (tmp, extra) => ({
        PATH: MINIMAL_PATH,
        TMPDIR: tmp,
        ...normalized.environment,
        ...(extra ?? {}),
      }),
    };
    const requested = params.capabilities ?? [];
    initReply = {
      version: PROTOCOL_VERSION,
      capabilities: requested.filter((c) => SUPPORTED_CAPABILITIES.has(c)),
      methods: METHODS.slice(),
      worker: { ...WORKER_INFO },
    };
    binding = normalized;
    pinnedToken = frame.token;
    state = 'ready';
    return initReply;
  } catch (e) {
    state = 'dead';
    if (e instanceof WorkerError) throw e;
    if (e.code === 'EACCES' || e.code === 'EPERM' || e.code === 'EROFS') throw fail('permission_denied', `${params.root}: ${e.code}`);
    throw fail('internal', `${params.root}: ${e.message}`);
  }
}

// ---- methods ---------------------------------------------------------------------------------

async function execute(data, signal) {
  const req = schemas.ExecutionToolRequestV4(data, '');
  const tool = TOOLS[req.tool];
  if (!tool) throw fail('unsupported_tool', `${req.tool} is not provided by this worker`);
  let args;
  try {
    args = parseJson(req.call.arguments);
  } catch (e) {
    throw fail('invalid_request', `call.arguments: not a JSON text (${e.message})`);
  }
  if (!isObject(args)) throw fail('invalid_request', 'call.arguments: must encode a JSON object');
  args = schemas.ToolArguments[req.tool](args, 'call.arguments');
  if (tool.mutating && req.permission_mode === 'read_only') {
    throw fail('permission_denied', `${req.tool} is a mutating tool and the permission mode is read_only`);
  }
  return tool.run(args, req.permission_mode, ctx, signal);
}

async function processStart(data) {
  const p = schemas.ProcessStartParams(data, '');
  refuseConfinedCommand(ctx, p.cwd, p.permission_mode);
  const cwd = await commandCwd(ctx, p.cwd, p.permission_mode);
  const tmp = await ctx.privateTempDir();
  return registry.start({
    operationId: p.operation_id,
    argv: p.argv,
    cwd: cwd.shown,
    spawnCwd: cwd.resolved,
    env: ctx.commandEnv(tmp, p.env),
    stdin: p.stdin ?? false,
    timeoutMs: p.timeout_ms === undefined ? null : Number(p.timeout_ms),
    retentionBytes:
      p.output_retention_bytes === undefined ? DEFAULT_OUTPUT_RETENTION_BYTES : Number(p.output_retention_bytes),
    waitForReader: p.output_flow === 'wait_for_reader',
  });
}

async function processList(data) {
  schemas.ProcessListParams(data, '');
  return { processes: registry.list() };
}

async function processGet(data) {
  const p = schemas.ProcessGetParams(data, '');
  return registry.lookup(p.id).record();
}

async function processRead(data, signal) {
  const p = schemas.ProcessReadParams(data, '');
  return registry.read(p, signal);
}

async function processStop(data, signal) {
  const p = schemas.ProcessStopParams(data, '');
  const proc = registry.lookup(p.id);
  return registry.stop(proc, p.signal ?? 'TERM', Number(p.grace_ms ?? 5000), 'stop_request', signal);
}

async function processWrite(data, signal) {
  const p = schemas.ProcessWriteParams(data, '');
  const bytes = decodeBase64(p.data, 'data');
  return registry.write(p, bytes, signal);
}

async function exportOpen(data, signal) {
  const p = schemas.ExportOpenParams(data, '');
  return exportStore.open(p.path, ctx, signal);
}

async function exportRead(data) {
  const p = schemas.ExportReadParams(data, '');
  return exportStore.read(p.token, p.offset, p.max_bytes);
}

async function exportClose(data) {
  const p = schemas.ExportCloseParams(data, '');
  return exportStore.close(p.token);
}

const HANDLERS = {
  execute,
  'process/start': processStart,
  'process/list': processList,
  'process/get': processGet,
  'process/read': processRead,
  'process/stop': processStop,
  'process/write': processWrite,
  'export/open': exportOpen,
  'export/read': exportRead,
  'export/close': exportClose,
};

// ---- lifetime --------------------------------------------------------------------------------

async function flushOutput(limitMs) {
  const deadline = Date.now() + limitMs;
  while (!outputFailed && out.writableLength > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// EOF, a malformed frame, an output failure or a signal: cancel and drain every handler, stop
// every owned process tree, remove private state (and the root when asked), then exit.
async function shutdown(exitCode) {
  if (shuttingDown) return;
  shuttingDown = true;
  process.stdin.removeAllListeners('data');
  process.stdin.pause();
  try {
    const entries = [...inflight.values()];
    for (const entry of entries) entry.controller.abort();
    await Promise.all(entries.map((entry) => entry.done));
    if (registry) await registry.shutdown(SHUTDOWN_GRACE_MS);
    if (exportStore) await exportStore.closeAll();
    await fsp.rm(workerTmp, { recursive: true, force: true }).catch(() => {});
    if (state === 'ready' && binding.remove_workspace_on_exit) {
      await fsp.rm(ctx.paths.rootLex, { recursive: true, force: true }).catch((e) => {
        process.stderr.write(`worker: could not remove the workspace: ${e.message}\n`);
        exitCode = exitCode || 1;
      });
    }
  } catch (e) {
    process.stderr.write(`worker: cleanup failed: ${e && e.stack ? e.stack : e}\n`);
    exitCode = exitCode || 1;
  }
  await flushOutput(5000);
  process.exit(exitCode);
}

process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));
process.on('SIGHUP', () => shutdown(0));
process.on('uncaughtException', (e) => {
  process.stderr.write(`worker: uncaught exception: ${e && e.stack ? e.stack : e}\n`);
  shutdown(1);
});
process.on('unhandledRejection', (e) => {
  process.stderr.write(`worker: unhandled rejection: ${e && e.stack ? e.stack : e}\n`);
  shutdown(1);
});
