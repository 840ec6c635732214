// export/open|read|close: immutable snapshots, copied into the worker's private directory at open.

import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { guardSensitive, realpathOrNull } from './paths.mjs';
import { cancelledError } from './processes.mjs';
import { fsError } from './tools.mjs';
import { toNumber, WorkerError } from './validate.mjs';

export const MAX_EXPORT_BYTES = 268435456;
const CHUNK = 1048576;

export class ExportStore {
  constructor(dir) {
    this.dir = dir;
    this.snapshots = new Map(); // token -> {file, size}
  }

  async open(p, ctx, signal) {
    // The path rules apply as in `standard` mode.
    const file = ctx.paths.resolve(p, true);
    guardSensitive([ctx.paths.lexical(p), file, realpathOrNull(file)], 'read', ctx.homes, p);
    let token;
    do token = `exp_${randomBytes(12).toString('hex')}`;
    while (this.snapshots.has(token));
    const copy = path.join(this.dir, token);
    let src;
    let dst;
    let complete = false;
    try {
      const st = await fs.stat(file);
      if (st.isDirectory()) throw new WorkerError('invalid_request', `${p} is a directory`);
      if (!st.isFile()) throw new WorkerError('invalid_request', `${p} is not a regular file`);
      if (st.size > MAX_EXPORT_BYTES) throw new WorkerError('artifact_too_large', `${p} is ${st.size} bytes`);
      src = await fs.open(file, 'r');
      dst = await fs.open(copy, 'wx', 0o600);
      const hash = createHash('sha256');
      const buf = Buffer.alloc(CHUNK);
      let size = 0;
      for (;;) {
        if (signal.aborted) throw cancelledError();
        const { bytesRead } = await src.read(buf, 0, CHUNK, null);
        if (bytesRead === 0) break;
        size += bytesRead;
        if (size > MAX_EXPORT_BYTES) throw new WorkerError('artifact_too_large', `${p} exceeds ${MAX_EXPORT_BYTES} bytes`);
        const piece = buf.subarray(0, bytesRead);
        hash.update(piece);
        await dst.write(piece);
      }
      this.snapshots.set(token, { file: copy, size });
      complete = true;
      return { token, size, sha256: hash.digest('hex') };
    } catch (e) {
      throw fsError(e, p);
    } finally {
      if (src) await src.close().catch(() => {});
      if (dst) await dst.close().catch(() => {});
      if (!complete) await fs.rm(copy, { force: true }).catch(() => {});
    }
  }

  lookup(token) {
    const snap = this.snapshots.get(token);
    if (!snap) throw new WorkerError('not_found', `no export ${token}`);
    return snap;
  }

  async read(token, offsetValue, maxBytesValue) {
    const snap = this.lookup(token);
    const offset = toNumber(offsetValue);
    const maxBytes = toNumber(maxBytesValue ?? 1048576);
    if (offset >= snap.size) return { data: '', eof: true };
    const length = Math.min(maxBytes, snap.size - offset);
    const buf = Buffer.alloc(length);
    const handle = await fs.open(snap.file, 'r');
    let filled = 0;
    try {
      while (filled < length) {
        const { bytesRead } = await handle.read(buf, filled, length - filled, offset + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
    } finally {
      await handle.close().catch(() => {});
    }
    return { data: buf.subarray(0, filled).toString('base64'), eof: offset + filled >= snap.size };
  }

  async close(token) {
    const snap = this.lookup(token);
    this.snapshots.delete(token);
    await fs.rm(snap.file, { force: true }).catch(() => {});
    return {};
  }

  async closeAll() {
    const files = [...this.snapshots.values()].map((s) => s.file);
    this.snapshots.clear();
    await Promise.all(files.map((f) => fs.rm(f, { force: true }).catch(() => {})));
  }
}
