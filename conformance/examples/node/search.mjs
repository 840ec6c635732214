// The search tools of `execute`: search_content (through the real ripgrep, `rg --json`) and search_files
// (a glob over the paths under a directory). Neither follows a symlink below its path, neither searches a
// `.git` directory, and search_content never shows a line of a sensitive path; the lines it shows are
// redacted by the spec's rules (redaction_rules.mjs).

import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import { accessSync, constants as fsConstants } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { evaluateSensitive, realpathOrNull } from './paths.mjs';
import { cancelledError } from './processes.mjs';
import { REDACTION_RULES } from './redaction_rules.mjs';
import { fsError, target } from './tools.mjs';
import { toNumber, WorkerError } from './validate.mjs';

const LINE_MAX_CHARS = 500; // search_line_max_chars of spec/methods/worker.json

// The `d` flag gives each group's offsets, so that a rule's group alone is replaced.
const COMPILED_RULES = REDACTION_RULES.map((rule) => ({
  id: rule.id,
  regex: new RegExp(rule.pattern, rule.case_insensitive ? 'dgi' : 'dg'),
}));

// Each rule in turn replaces its matches: the first capturing group that took part, else the whole match.
export function redact(text) {
  let out = text;
  for (const { id, regex } of COMPILED_RULES) {
    let rebuilt = '';
    let last = 0;
    for (const match of out.matchAll(regex)) {
      const group = match.indices.findIndex((span, index) => index > 0 && span !== undefined);
      const [from, to] = group > 0 ? match.indices[group] : match.indices[0];
      rebuilt += `${out.slice(last, from)}[REDACTED:${id}]`;
      last = to;
    }
    out = rebuilt + out.slice(last);
  }
  return out;
}

function cut(line) {
  const chars = Array.from(line);
  return chars.length <= LINE_MAX_CHARS ? line : `${chars.slice(0, LINE_MAX_CHARS).join('')}…`;
}

// A path as the search tools show it: relative to the root, absolute outside it.
function shown(abs, rootReal) {
  if (abs === rootReal) return '.';
  const prefix = rootReal.endsWith('/') ? rootReal : `${rootReal}/`;
  return abs.startsWith(prefix) ? abs.slice(prefix.length) : abs;
}

function findRipgrep() {
  for (const dir of (process.env.PATH || '').split(':')) {
    if (!dir) continue;
    const candidate = path.posix.join(dir, 'rg');
    try {
      accessSync(candidate, fsConstants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new WorkerError('unsupported_tool', 'search_content needs ripgrep (the rg command), which is not installed here');
}

async function kindOf(file, shownPath) {
  try {
    return await fs.stat(file);
  } catch (e) {
    throw fsError(e, shownPath);
  }
}

function ripgrepText(value) {
  return 'text' in value ? value.text : new TextDecoder().decode(Buffer.from(value.bytes, 'base64'));
}

export async function searchContent(args, mode, ctx, signal) {
  const shownPath = args.path ?? '.';
  const file = target(ctx, shownPath, mode, 'read');
  const rg = findRipgrep();
  const st = await kindOf(file, shownPath);
  if (!st.isDirectory() && !st.isFile()) {
    throw new WorkerError('invalid_request', `${shownPath} is neither a directory nor a file`);
  }
  const limit = toNumber(args.max_results ?? 100);
  const argv = ['--json', '--no-config', '--no-ignore', '--sort', 'path'];
  argv.push(args.case_sensitive === false ? '--ignore-case' : '--case-sensitive');
  if (args.literal) argv.push('--fixed-strings');
  if (args.include_hidden) argv.push('--hidden');
  for (const glob of args.globs ?? []) argv.push('--glob', glob);
  argv.push('--glob', '!.git', '--regexp', args.pattern, '--', file);
  const child = spawn(rg, argv, { cwd: ctx.paths.rootReal, env: {}, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    if (stderr.length < 8192) stderr += chunk.toString('utf8');
  });
  const exited = new Promise((resolve) => child.on('close', (code) => resolve(code)));
  const onAbort = () => child.kill('SIGKILL');
  signal.addEventListener('abort', onAbort);
  const lines = [];
  const files = new Set();
  const allowed = new Map();
  let truncated = false;
  let summary = false;
  try {
    for await (const text of readline.createInterface({ input: child.stdout, crlfDelay: Infinity })) {
      const message = JSON.parse(text);
      if (message.type === 'summary') summary = true;
      if (message.type !== 'match') continue;
      const abs = ripgrepText(message.data.path);
      if (!allowed.has(abs)) {
        const forms = [abs, realpathOrNull(abs)].filter(Boolean);
        allowed.set(abs, !forms.some((form) => evaluateSensitive(form, ctx.homes).sensitive));
      }
      if (!allowed.get(abs)) continue;
      if (lines.length === limit) {
        truncated = true;
        child.kill('SIGKILL');
        break;
      }
      const line = ripgrepText(message.data.lines).replace(/\r?\n$/, '');
      const where = shown(abs, ctx.paths.rootReal);
      lines.push(`${where}:${message.data.line_number}:${cut(redact(line))}`);
      files.add(where);
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  const code = await exited;
  if (signal.aborted) throw cancelledError();
  if (code === 2 && !summary && !truncated) {
    throw new WorkerError('invalid_request', `pattern: ${stderr.split(/\s+/).join(' ').trim()}`);
  }
  let output = lines.join('\n');
  if (truncated) output += `\n[more matches were left out: max_results (${limit}) reached]`;
  return { output, is_error: false, metadata: { matches: lines.length, files: files.size, truncated } };
}

// A search glob as a RegExp over a relative path: with a `/`, the whole path; without one, its last component.
function translate(glob) {
  let out = '';
  for (let i = 0; i < glob.length; ) {
    const atStart = i === 0 || glob[i - 1] === '/';
    if (atStart && glob.startsWith('**/', i)) {
      out += '(?:[^/]*/)*';
      i += 3;
    } else if (atStart && glob.startsWith('**', i) && i + 2 === glob.length) {
      out += '.*';
      i += 2;
    } else if (glob[i] === '*') {
      out += '[^/]*';
      i += 1;
    } else if (glob[i] === '?') {
      out += '[^/]';
      i += 1;
    } else if (glob[i] === '{' && glob.indexOf('}', i) > 0) {
      const end = glob.indexOf('}', i);
      out += `(?:${glob.slice(i + 1, end).split(',').map(translate).join('|')})`;
      i = end + 1;
    } else {
      out += glob[i].replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
      i += 1;
    }
  }
  return out;
}

export function globRegExp(glob) {
  const body = translate(glob);
  return new RegExp(glob.includes('/') ? `^${body}$` : `^(?:.*/)?${body}$`, 's');
}

export async function searchFiles(args, mode, ctx, signal) {
  const shownPath = args.path ?? '.';
  const dir = target(ctx, shownPath, mode, null);
  const st = await kindOf(dir, shownPath);
  if (!st.isDirectory()) throw new WorkerError('invalid_request', `${shownPath} is not a directory`);
  const pattern = globRegExp(args.pattern);
  const includeHidden = Boolean(args.include_hidden);
  const base = shown(dir, ctx.paths.rootReal);
  const prefix = base === '.' ? '' : `${base.replace(/\/$/, '')}/`;
  const found = [];
  const visit = async (abs, rel) => {
    if (signal.aborted) throw cancelledError();
    let entries;
    try {
      entries = await fs.readdir(abs, { withFileTypes: true });
    } catch (e) {
      if (rel === '') throw fsError(e, shownPath);
      return; // an unreadable subdirectory is matched but not descended into
    }
    for (const entry of entries) {
      if (entry.name === '.git' || (!includeHidden && entry.name.startsWith('.'))) continue;
      const childRel = rel === '' ? entry.name : `${rel}/${entry.name}`;
      const isDir = entry.isDirectory(); // a Dirent does not follow symlinks
      if (pattern.test(childRel)) found.push(prefix + childRel + (isDir ? '/' : ''));
      if (isDir) await visit(`${abs === '/' ? '' : abs}/${entry.name}`, childRel);
    }
  };
  await visit(dir, '');
  found.sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
  const limit = toNumber(args.max_results ?? 500);
  const paths = found.slice(0, limit);
  const truncated = found.length > limit;
  let output = paths.join('\n');
  if (truncated) output += `\n[${found.length - limit} more paths were left out: max_results (${limit}) reached]`;
  return { output, is_error: false, metadata: { paths, truncated } };
}
