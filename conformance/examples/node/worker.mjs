#!/usr/bin/env node
// A Node.js worker of the Wuu v4 execution-worker protocol on the Node SDK (node/plugin-sdk): the SDK owns the
// framing, the token and binding rules, the validation of every frame against the spec, cancellation and the
// end of the connection; this file is the provider: initialize, the methods map and close (see README.md).

import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

import { runExecutionBackendV4, toolArguments, WorkerError } from '../../../node/plugin-sdk/src/index.mjs';
import { ExportStore } from './exports.mjs';
import { PathContext, sensitiveHomes } from './paths.mjs';
import { DEFAULT_OUTPUT_RETENTION_BYTES, MINIMAL_PATH, ProcessRegistry } from './processes.mjs';
import { commandCwd, refuseConfinedCommand, TOOLS } from './tools.mjs';
import { decodeBase64 } from './validate.mjs';

const SHUTDOWN_GRACE_MS = 2000;
const fail = (code, message) => new WorkerError(code, message);

const workerTmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wuu-node-worker-'));
const sockDir = fs.mkdtempSync(path.join(workerTmp, 's'));
const homes = sensitiveHomes();

let binding = null;
let ctx = null; // the tools' context, set by initialize
let registry = null;
let exportStore = null;

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

async function initialize(params, context) {
  try {
    const fileRootsGiven = params.file_roots ?? [];
    const wuuHomes = fileRootsGiven.filter((r) => r.kind === 'wuu_home');
    if (wuuHomes.length > 1) throw fail('invalid_request', 'file_roots: a second wuu_home (at most one)');
    const must = params.require_existing_workspace;
    const rootLex = path.posix.resolve(params.root);
    const rootReal = await bindDirectory(rootLex, 'root', must);
    const fileRoots = [];
    for (const [index, r] of fileRootsGiven.entries()) {
      const lex = path.posix.resolve(r.path);
      fileRoots.push(new PathContext(lex, await bindDirectory(lex, `file_roots.${index}.path`, must)));
    }
    if (context.signal.aborted) throw fail('cancelled');
    const emit = (type, cause, record) => context.emitProcess({ Type: type, Cause: cause, Process: record });
    registry = new ProcessRegistry({ session: params.session, emit, sockDir });
    exportStore = new ExportStore(await fsp.mkdtemp(path.join(workerTmp, 'exports-')));
    const environment = params.environment ?? {};
    ctx = {
      paths: new PathContext(rootLex, rootReal, fileRoots),
      homes: wuuHomes.length > 0 ? { ...homes, wuu: [homes.wuu, path.posix.resolve(wuuHomes[0].path)] } : homes,
      sockDir,
      privateTempDir: () => fsp.mkdtemp(path.join(workerTmp, 'tmp-')),
      commandEnv: (tmp, extra) => ({ PATH: MINIMAL_PATH, TMPDIR: tmp, ...environment, ...(extra ?? {}) }),
    };
    binding = params;
  } catch (e) {
    if (e instanceof WorkerError) throw e;
    if (e.code === 'EACCES' || e.code === 'EPERM' || e.code === 'EROFS') throw fail('permission_denied', `${params.root}: ${e.code}`);
    throw fail('internal', `${params.root}: ${e.message}`);
  }
}

async function execute(request, context) {
  const tool = TOOLS[request.tool];
  if (!tool) throw fail('unsupported_tool', `${request.tool} is not provided by this worker`);
  const args = toolArguments(request);
  if (tool.mutating && request.permission_mode === 'read_only') {
    throw fail('permission_denied', `${request.tool} is a mutating tool and the permission mode is read_only`);
  }
  return tool.run(args, request.permission_mode, ctx, context.signal);
}

async function processStart(p) {
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
    retentionBytes: p.output_retention_bytes === undefined ? DEFAULT_OUTPUT_RETENTION_BYTES : Number(p.output_retention_bytes),
    waitForReader: p.output_flow === 'wait_for_reader',
  });
}

const methods = {
  execute,
  'process/start': processStart,
  'process/list': async () => ({ processes: registry.list() }),
  'process/get': async (p) => registry.lookup(p.id).record(),
  'process/read': async (p, context) => registry.read(p, context.signal),
  'process/stop': async (p, context) =>
    registry.stop(registry.lookup(p.id), p.signal ?? 'TERM', Number(p.grace_ms ?? 5000), 'stop_request', context.signal),
  'process/write': async (p, context) => registry.write(p, decodeBase64(p.data, 'data'), context.signal),
  'export/open': async (p, context) => exportStore.open(p.path, ctx, context.signal),
  'export/read': async (p) => exportStore.read(p.token, p.offset, p.max_bytes),
  'export/close': async (p) => exportStore.close(p.token),
};

// Stop every owned process tree, remove private state, and the root when the binding asks.
async function close() {
  if (registry) await registry.shutdown(SHUTDOWN_GRACE_MS);
  if (exportStore) await exportStore.closeAll();
  await fsp.rm(workerTmp, { recursive: true, force: true });
  if (binding?.remove_workspace_on_exit) await fsp.rm(ctx.paths.rootLex, { recursive: true, force: true });
}

const code = await runExecutionBackendV4({
  initialize,
  methods,
  close,
  capabilities: ['process.start.v1'],
  info: { name: 'wuu-node-example-worker', version: '0.1.0' },
});
process.exit(code);
