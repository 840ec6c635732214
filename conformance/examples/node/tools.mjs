// The core workspace tools of `execute`: read_file, write_file, edit_file, list_dir, exec_command, and the
// search tools (search.mjs).

import fs from 'node:fs/promises';
import { lstatSync } from 'node:fs';
import path from 'node:path';
import { guardSensitive, realpathOrNull } from './paths.mjs';
import { cancelledError, runCommand } from './processes.mjs';
import { searchContent, searchFiles } from './search.mjs';
import { toNumber, WorkerError } from './validate.mjs';

const MAX_FRAME_BYTES = 16777216;

// Maps an operating-system error on `shown` to a protocol error.
export function fsError(e, shown) {
  if (e instanceof WorkerError) return e;
  switch (e && e.code) {
    case 'ENOENT':
    case 'ENOTDIR':
      return new WorkerError('not_found', `${shown}: no such file or directory`);
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new WorkerError('permission_denied', `${shown}: ${e.code}`);
    case 'EISDIR':
      return new WorkerError('invalid_request', `${shown} is a directory`);
    case 'ELOOP':
      return new WorkerError('invalid_request', `${shown}: too many levels of symbolic links`);
    case 'ENAMETOOLONG':
      return new WorkerError('invalid_request', `${shown}: name too long`);
    default:
      return new WorkerError('internal', `${shown}: ${e && e.message ? e.message : String(e)}`);
  }
}

const decodeLossy = (buf) => new TextDecoder('utf-8', { ignoreBOM: true }).decode(buf);

async function statOrNull(p) {
  try {
    return await fs.stat(p);
  } catch (e) {
    if (e.code === 'ENOENT' || e.code === 'ENOTDIR') return null;
    throw e;
  }
}

// Resolves a tool path under the call's permission mode and applies the sensitive-path guard.
export function target(ctx, p, mode, operation) {
  const resolved = ctx.paths.resolve(p, mode !== 'unconfined');
  if (operation === 'write' && mode !== 'unconfined') refuseMultiLink(resolved, p);
  if (operation) {
    guardSensitive([ctx.paths.lexical(p), resolved, realpathOrNull(resolved)], operation, ctx.homes, p);
  }
  return resolved;
}

// Under the root boundary a write to a regular file with more than one hard link is refused as an escape:
// another link may name the same file outside the root.
function refuseMultiLink(file, shown) {
  let st;
  try {
    st = lstatSync(file);
  } catch {
    return;
  }
  if (st.isFile() && st.nlink > 1) {
    throw new WorkerError('path_outside_root', `${shown} has more than one hard link; it may be named outside the workspace root`);
  }
}

async function readFile(args, mode, ctx) {
  const file = target(ctx, args.path, mode, 'read');
  let handle;
  try {
    const st = await statOrNull(file);
    if (!st) throw new WorkerError('not_found', `${args.path}: no such file`);
    if (st.isDirectory()) throw new WorkerError('invalid_request', `${args.path} is a directory`);
    if (!st.isFile()) throw new WorkerError('invalid_request', `${args.path} is not a regular file`);
    handle = await fs.open(file, 'r');
    const size = (await handle.stat()).size;
    const offset = toNumber(args.offset_bytes ?? 0);
    const maxBytes = toNumber(args.max_bytes ?? 1048576);
    let buf = Buffer.alloc(0);
    if (offset < size) {
      buf = Buffer.alloc(Math.min(maxBytes, size - offset));
      let filled = 0;
      while (filled < buf.length) {
        const { bytesRead } = await handle.read(buf, filled, buf.length - filled, offset + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      buf = buf.subarray(0, filled);
    }
    return {
      output: decodeLossy(buf),
      is_error: false,
      metadata: {
        size,
        offset_bytes: args.offset_bytes ?? 0,
        returned_bytes: buf.length,
        eof: offset + buf.length >= size,
      },
    };
  } catch (e) {
    throw fsError(e, args.path);
  } finally {
    if (handle) await handle.close().catch(() => {});
  }
}

async function writeFile(args, mode, ctx) {
  const file = target(ctx, args.path, mode, 'write');
  try {
    const st = await statOrNull(file);
    if (st && st.isDirectory()) throw new WorkerError('invalid_request', `${args.path} is a directory`);
    if (st && !st.isFile()) throw new WorkerError('invalid_request', `${args.path} is not a regular file`);
    const parent = path.posix.dirname(file);
    if (args.create_dirs) {
      try {
        await fs.mkdir(parent, { recursive: true });
      } catch (e) {
        if (e.code === 'EEXIST' || e.code === 'ENOTDIR') {
          throw new WorkerError('invalid_request', `${args.path}: a parent is not a directory`);
        }
        throw e;
      }
    } else {
      const pst = await statOrNull(parent);
      if (!pst || !pst.isDirectory()) throw new WorkerError('not_found', `${args.path}: the parent directory does not exist`);
    }
    const bytes = Buffer.from(args.content, 'utf8');
    await fs.writeFile(file, bytes);
    return {
      output: `Wrote ${bytes.length} bytes to ${args.path}`,
      is_error: false,
      metadata: { bytes_written: bytes.length, created: !st },
    };
  } catch (e) {
    throw fsError(e, args.path);
  }
}

function countOccurrences(haystack, needle) {
  const positions = [];
  let from = 0;
  for (;;) {
    const at = haystack.indexOf(needle, from);
    if (at < 0) return positions;
    positions.push(at);
    from = at + needle.length;
  }
}

async function editFile(args, mode, ctx) {
  const file = target(ctx, args.path, mode, 'write');
  try {
    const st = await statOrNull(file);
    if (!st) throw new WorkerError('not_found', `${args.path}: no such file`);
    if (st.isDirectory()) throw new WorkerError('invalid_request', `${args.path} is a directory`);
    if (!st.isFile()) throw new WorkerError('invalid_request', `${args.path} is not a regular file`);
    const content = await fs.readFile(file);
    const needle = Buffer.from(args.old_string, 'utf8');
    const positions = countOccurrences(content, needle);
    if (positions.length === 0) {
      return { output: `old_string was not found in ${args.path}; the file is unchanged`, is_error: true };
    }
    if (positions.length > 1 && !args.replace_all) {
      return {
        output: `old_string occurs ${positions.length} times in ${args.path}; set replace_all or give more context. The file is unchanged`,
        is_error: true,
      };
    }
    const replacement = Buffer.from(args.new_string, 'utf8');
    const parts = [];
    let last = 0;
    for (const at of positions) {
      parts.push(content.subarray(last, at), replacement);
      last = at + needle.length;
    }
    parts.push(content.subarray(last));
    await fs.writeFile(file, Buffer.concat(parts));
    const n = positions.length;
    return {
      output: `Replaced ${n} occurrence${n === 1 ? '' : 's'} in ${args.path}`,
      is_error: false,
      metadata: { replacements: n },
    };
  } catch (e) {
    throw fsError(e, args.path);
  }
}

function entryType(st) {
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isDirectory()) return 'directory';
  if (st.isFile()) return 'file';
  return 'other';
}

async function listDir(args, mode, ctx, signal) {
  const dir = target(ctx, args.path, mode, null);
  const depth = toNumber(args.depth ?? 1);
  const includeHidden = Boolean(args.include_hidden);
  const entries = [];
  try {
    const st = await statOrNull(dir);
    if (!st) throw new WorkerError('not_found', `${args.path}: no such directory`);
    if (!st.isDirectory()) throw new WorkerError('invalid_request', `${args.path} is not a directory`);
    const visit = async (abs, rel, level, top) => {
      if (signal.aborted) throw cancelledError();
      let names;
      try {
        names = await fs.readdir(abs);
      } catch (e) {
        if (top) throw e;
        return; // an unreadable subdirectory is listed but not descended into
      }
      for (const name of names) {
        if (!includeHidden && name.startsWith('.')) continue;
        const childAbs = `${abs === '/' ? '' : abs}/${name}`;
        const childRel = rel === '' ? name : `${rel}/${name}`;
        let lst;
        try {
          lst = await fs.lstat(childAbs);
        } catch {
          continue; // vanished meanwhile
        }
        const type = entryType(lst);
        entries.push({ path: childRel, type, size: type === 'directory' ? 0 : lst.size });
        if (type === 'directory' && level < depth) await visit(childAbs, childRel, level + 1, false);
      }
    };
    await visit(dir, '', 1, true);
  } catch (e) {
    throw fsError(e, args.path);
  }
  entries.sort((a, b) => Buffer.compare(Buffer.from(a.path, 'utf8'), Buffer.from(b.path, 'utf8')));
  return {
    output: entries.map((e) => (e.type === 'directory' ? `${e.path}/` : e.path)).join('\n'),
    is_error: false,
    metadata: { entries },
  };
}

// Resolves and checks a command's working directory. Returns {shown, resolved}.
export async function commandCwd(ctx, cwd, mode) {
  const confined = mode !== 'unconfined';
  if (cwd === undefined) return { shown: ctx.paths.rootLex, resolved: ctx.paths.rootReal };
  const resolved = ctx.paths.resolve(cwd, confined);
  const st = await statOrNull(resolved).catch((e) => {
    throw fsError(e, cwd);
  });
  if (!st) throw new WorkerError('not_found', `${cwd}: no such directory`);
  if (!st.isDirectory()) throw new WorkerError('invalid_request', `${cwd} is not a directory`);
  return { shown: ctx.paths.lexical(cwd), resolved };
}

export function refuseConfinedCommand(ctx, cwd, mode) {
  if (mode === 'unconfined') return;
  // The path rules still apply first; then there is no OS sandbox to run the command in.
  if (cwd !== undefined) ctx.paths.resolve(cwd, true);
  throw new WorkerError(
    'sandbox_unavailable',
    `this worker has no OS sandbox; a command in ${mode} mode is refused, never run unconfined`,
  );
}

async function execCommand(args, mode, ctx, signal) {
  refuseConfinedCommand(ctx, args.cwd, mode);
  const cwd = await commandCwd(ctx, args.cwd, mode);
  const tmp = await ctx.privateTempDir();
  try {
    const result = await runCommand(args.argv, {
      cwd: cwd.resolved,
      env: ctx.commandEnv(tmp, args.env),
      timeoutMs: args.timeout_ms === undefined ? null : toNumber(args.timeout_ms),
      signal,
      sockDir: ctx.sockDir,
      outputCap: MAX_FRAME_BYTES,
    });
    return {
      output: decodeLossy(result.output),
      is_error: result.exitCode !== 0,
      metadata: {
        exit_code: result.exitCode,
        signal: result.signal,
        timed_out: result.timedOut,
        duration_ns: result.durationNs,
      },
    };
  } finally {
    await fs.rm(tmp, { recursive: true, force: true }).catch(() => {});
  }
}

export const TOOLS = {
  read_file: { mutating: false, run: readFile },
  write_file: { mutating: true, run: writeFile },
  edit_file: { mutating: true, run: editFile },
  list_dir: { mutating: false, run: listDir },
  search_content: { mutating: false, run: searchContent },
  search_files: { mutating: false, run: searchFiles },
  exec_command: { mutating: false, run: execCommand },
};
