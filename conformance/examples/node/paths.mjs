// Path resolution (the root boundary of `standard` and `read_only`) and the sensitive-path rules.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SENSITIVE_PATH_RULES } from './sensitive_rules.mjs';
import { WorkerError } from './validate.mjs';

const MAX_SYMLINK_HOPS = 40;

export const splitPath = (p) => p.split('/').filter((c) => c !== '' && c !== '.');
const joinComponents = (comps) => `/${comps.join('/')}`;
const isInside = (comps, rootComps) =>
  comps.length >= rootComps.length && rootComps.every((c, i) => comps[i] === c);

function outside(p) {
  return new WorkerError('path_outside_root', `${p} resolves outside the workspace root`);
}

// Walks `comps` from the absolute position `start` (a component list), following symlinks one
// component at a time. When `floor` is a number, the walk may never go above that many leading
// components (the root): `..` or a symlink that leaves it throws path_outside_root. Components
// that do not exist are kept lexically. Returns the resolved component list.
function walk(start, comps, floor, rootComps, original) {
  const stack = start.slice();
  const queue = comps.slice();
  let hops = 0;
  let missingFrom = -1; // stack length at which a component first did not exist
  while (queue.length > 0) {
    const c = queue.shift();
    if (c === '' || c === '.') continue;
    if (c === '..') {
      if (floor !== null && stack.length <= floor) throw outside(original);
      if (stack.length > 0) stack.pop();
      if (missingFrom >= 0 && stack.length < missingFrom) missingFrom = -1;
      continue;
    }
    stack.push(c);
    if (missingFrom >= 0) continue;
    const full = joinComponents(stack);
    let st;
    try {
      st = fs.lstatSync(full);
    } catch (e) {
      if (e.code === 'ENOENT' || e.code === 'ENOTDIR') {
        missingFrom = stack.length;
        continue;
      }
      if (e.code === 'EACCES' || e.code === 'EPERM') throw new WorkerError('permission_denied', `${original}: ${e.code}`);
      if (e.code === 'ENAMETOOLONG') throw new WorkerError('invalid_request', `${original}: name too long`);
      throw new WorkerError('internal', `${original}: ${e.message}`);
    }
    if (!st.isSymbolicLink()) continue;
    if (++hops > MAX_SYMLINK_HOPS) throw new WorkerError('invalid_request', `${original}: too many levels of symbolic links`);
    const target = fs.readlinkSync(full);
    stack.pop();
    if (target.startsWith('/')) {
      if (floor !== null) {
        // An absolute target must itself land inside the root.
        const resolved = walk([], splitPath(target), null, rootComps, original);
        if (!isInside(resolved, rootComps)) throw outside(original);
        stack.length = 0;
        stack.push(...resolved);
      } else {
        stack.length = 0;
        queue.unshift(...target.split('/'));
      }
    } else {
      queue.unshift(...target.split('/'));
    }
  }
  return stack;
}

// The workspace binding's view of paths. `fileRoots` are the binding's other file roots (each a
// PathContext of its own): an absolute path may resolve inside the first of the root and them that
// it stays inside.
export class PathContext {
  constructor(rootLex, rootReal, fileRoots = []) {
    this.rootLex = rootLex;
    this.rootReal = rootReal;
    this.rootLexComps = splitPath(rootLex);
    this.rootRealComps = splitPath(rootReal);
    this.fileRoots = fileRoots;
  }

  // The tool's path made absolute (against the root) and lexically normalized.
  lexical(p) {
    return path.posix.resolve(this.rootLex, p);
  }

  // Resolves `p` for an operation. confined: every component stays inside the root (or, for an
  // absolute path, inside one file root).
  resolve(p, confined) {
    if (!confined || !p.startsWith('/') || this.fileRoots.length === 0) return this.resolveHere(p, confined);
    let refusal = null;
    for (const context of [this, ...this.fileRoots]) {
      try {
        return context.resolveHere(p, true);
      } catch (e) {
        if (!(e instanceof WorkerError) || e.code !== 'path_outside_root') throw e;
        refusal = refusal ?? e;
      }
    }
    throw refusal;
  }

  resolveHere(p, confined) {
    if (p.includes('\u0000')) throw new WorkerError('invalid_request', 'path contains a NUL byte');
    if (!confined) {
      const comps = p.startsWith('/') ? p.split('/') : [...this.rootLexComps, ...p.split('/')];
      return joinComponents(walk([], comps, null, this.rootRealComps, p));
    }
    const floor = this.rootRealComps.length;
    if (!p.startsWith('/')) {
      return joinComponents(walk(this.rootRealComps, p.split('/'), floor, this.rootRealComps, p));
    }
    const comps = splitPath(p);
    for (const prefix of [this.rootRealComps, this.rootLexComps]) {
      if (isInside(comps, prefix)) {
        return joinComponents(walk(this.rootRealComps, comps.slice(prefix.length), floor, this.rootRealComps, p));
      }
    }
    // An absolute path that does not name the root literally: resolve it physically and accept
    // it only if it lands inside the root.
    const resolved = walk([], p.split('/'), null, this.rootRealComps, p);
    if (!isInside(resolved, this.rootRealComps)) throw outside(p);
    return joinComponents(resolved);
  }
}

// ---- sensitive paths -------------------------------------------------------------------------

const asciiLower = (s) => s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));

// Glob over one component: `*` any run, `?` one character, everything else literal; ASCII
// case-insensitive.
export function globMatch(pattern, name) {
  const p = Array.from(asciiLower(pattern));
  const s = Array.from(asciiLower(name));
  let pi = 0;
  let si = 0;
  let star = -1;
  let mark = 0;
  while (si < s.length) {
    if (pi < p.length && (p[pi] === '?' || (p[pi] !== '*' && p[pi] === s[si]))) {
      pi++;
      si++;
    } else if (pi < p.length && p[pi] === '*') {
      star = pi++;
      mark = si;
    } else if (star >= 0) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.length && p[pi] === '*') pi++;
  return pi === p.length;
}

export function sensitiveHomes(env = process.env) {
  const user = path.posix.resolve(env.HOME && env.HOME !== '' ? env.HOME : os.homedir());
  const wuu = env.WUU_HOME && env.WUU_HOME !== '' ? path.posix.resolve(env.WUU_HOME) : path.posix.join(user, '.wuu');
  return { user, wuu };
}

// Evaluates the rules against one absolute, normalized path.
export function evaluateSensitive(absPath, homes, rules = SENSITIVE_PATH_RULES) {
  const comps = splitPath(absPath);
  const last = comps.length > 0 ? comps[comps.length - 1] : '';
  const matched = [];
  let readBlocked = false;
  for (const rule of rules) {
    let hit = false;
    if (comps.length === 0) hit = false;
    else if (rule.kind === 'basename_glob') {
      hit = rule.patterns.some((g) => globMatch(g, last));
    } else if (rule.kind === 'path_suffix_glob') {
      hit = rule.patterns.some((g) => {
        const parts = g.split('/');
        if (comps.length < parts.length) return false;
        const tail = comps.slice(comps.length - parts.length);
        return parts.every((part, i) => globMatch(part, tail[i]));
      });
    } else if (rule.kind === 'under_home') {
      // A home is one directory, or several (Wuu home: the worker's own and the binding's).
      for (const home of [].concat(homes[rule.home] ?? [])) {
        const homeComps = splitPath(home);
        if (comps.length > homeComps.length && isInside(comps, homeComps)) {
          const rel = comps.slice(homeComps.length);
          hit ||= rule.patterns.some((g) => {
            const parts = g.split('/');
            return parts.length === rel.length && parts.every((part, i) => globMatch(part, rel[i]));
          });
        }
      }
    }
    if (hit && Array.isArray(rule.exempt) && rule.exempt.some((g) => globMatch(g, last))) hit = false;
    if (hit) {
      matched.push(rule.id);
      if (rule.access === 'read_write') readBlocked = true;
    }
  }
  return { sensitive: matched.length > 0, readBlocked, rules: matched };
}

// Checks every form of a tool's path (lexical and symlink-resolved); throws sensitive_path when
// the operation ('read' or 'write') is refused.
export function guardSensitive(forms, operation, homes, shownPath) {
  for (const form of forms) {
    if (!form) continue;
    const verdict = evaluateSensitive(form, homes);
    if (!verdict.sensitive) continue;
    if (operation === 'write' || verdict.readBlocked) {
      throw new WorkerError('sensitive_path', `${shownPath} is a sensitive path (${verdict.rules.join(', ')})`);
    }
  }
}

export function realpathOrNull(p) {
  try {
    return fs.realpathSync(p);
  } catch {
    return null;
  }
}
