// Hand-written validators for the parameter shapes of spec/schema/worker/*.schema.json.
//
// Each validator takes (value, fieldPath) and returns the value (objects are rebuilt with their
// known properties only) or throws a WorkerError `invalid_request` naming the dotted field path.
// Types are checked strictly: "1" is not an integer and 1 is not a string. An integer is a Number
// without a fractional part or a BigInt (json.mjs makes one of every literal beyond 2^53); json.mjs
// boxes every literal written with a fraction or an exponent (4.0, 1e3), so it is never an integer.

export class WorkerError extends Error {
  constructor(code, message) {
    super(message ? `${code}: ${message}` : code);
    this.code = code;
    this.detail = message || '';
  }
}

export const INT64_MAX = 9223372036854775807n;
export const INT32_MAX = 2147483647n;

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const fieldName = (path) => (path === '' ? 'data' : path);
const join = (path, key) => (path === '' ? String(key) : `${path}.${key}`);

export function invalid(path, message) {
  return new WorkerError('invalid_request', `${fieldName(path)}: ${message}`);
}

export const isInteger = (v) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
const big = (v) => (typeof v === 'bigint' ? v : BigInt(v));
export const utf8Length = (s) => Buffer.byteLength(s, 'utf8');
const codePoints = (s) => {
  let count = 0;
  for (const _ of s) count++;
  return count;
};

export function str({ minLength = 0, maxLength = null, pattern = null, maxUtf8 = null } = {}) {
  return (v, path) => {
    if (typeof v !== 'string') throw invalid(path, 'must be a string');
    if (minLength > 0 && codePoints(v) < minLength) throw invalid(path, `must have at least ${minLength} character(s)`);
    if (maxLength !== null && codePoints(v) > maxLength) throw invalid(path, `must have at most ${maxLength} characters`);
    if (pattern && !pattern.test(v)) throw invalid(path, `must match ${pattern.source}`);
    if (maxUtf8 !== null && utf8Length(v) > maxUtf8) throw invalid(path, `must be at most ${maxUtf8} UTF-8 bytes`);
    return v;
  };
}

export function int(min, max) {
  const lo = BigInt(min);
  const hi = BigInt(max);
  return (v, path) => {
    if (!isInteger(v)) throw invalid(path, 'must be an integer');
    const b = big(v);
    if (b < lo) throw invalid(path, `must be >= ${lo}`);
    if (b > hi) throw invalid(path, `must be <= ${hi}`);
    return v;
  };
}

export function bool() {
  return (v, path) => {
    if (typeof v !== 'boolean') throw invalid(path, 'must be a boolean');
    return v;
  };
}

export function enumOf(values) {
  const set = new Set(values);
  return (v, path) => {
    if (typeof v !== 'string' || !set.has(v)) throw invalid(path, `must be one of ${values.join(', ')}`);
    return v;
  };
}

export function arrayOf(item, { minItems = 0, maxItems = null, unique = false } = {}) {
  return (v, path) => {
    if (!Array.isArray(v)) throw invalid(path, 'must be an array');
    if (v.length < minItems) throw invalid(path, `must have at least ${minItems} item(s)`);
    if (maxItems !== null && v.length > maxItems) throw invalid(path, `must have at most ${maxItems} item(s)`);
    const out = v.map((x, i) => item(x, join(path, i)));
    if (unique) {
      const seen = new Set();
      for (const x of out) {
        const key = typeof x === 'string' ? `s:${x}` : `j:${JSON.stringify(x)}`;
        if (seen.has(key)) throw invalid(path, 'items must be unique');
        seen.add(key);
      }
    }
    return out;
  };
}

// An open map of string values, optionally with a key pattern (propertyNames).
export function stringMap(keyPattern = null, valuePattern = null) {
  return (v, path) => {
    if (!isObject(v)) throw invalid(path, 'must be an object');
    const out = {};
    for (const key of Object.keys(v)) {
      if (keyPattern && !keyPattern.test(key)) throw invalid(path, `key ${JSON.stringify(key)} must match ${keyPattern.source}`);
      if (typeof v[key] !== 'string') throw invalid(join(path, key), 'must be a string');
      if (valuePattern && !valuePattern.test(v[key])) throw invalid(join(path, key), `must match ${valuePattern.source}`);
      Object.defineProperty(out, key, { value: v[key], enumerable: true, writable: true, configurable: true });
    }
    return out;
  };
}

// A free-form JSON object.
export function anyObject() {
  return (v, path) => {
    if (!isObject(v)) throw invalid(path, 'must be an object');
    return v;
  };
}

// A closed object: unknown properties are rejected, required ones must be present.
export function object(properties, required = []) {
  return (v, path) => {
    if (!isObject(v)) throw invalid(path, 'must be an object');
    for (const key of Object.keys(v)) {
      if (!Object.hasOwn(properties, key)) throw invalid(join(path, key), 'unknown field');
    }
    for (const key of required) {
      if (!Object.hasOwn(v, key)) throw invalid(join(path, key), 'missing required field');
    }
    const out = {};
    for (const key of Object.keys(properties)) {
      if (Object.hasOwn(v, key)) out[key] = properties[key](v[key], join(path, key));
    }
    return out;
  };
}

// Standard base64 with padding (RFC 4648 section 4); returns the decoded bytes.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
export function decodeBase64(v, path) {
  if (!BASE64.test(v)) throw invalid(path, 'must be standard base64 with padding');
  return Buffer.from(v, 'base64');
}

// Converts a validated integer (Number or BigInt) into a Number, saturating at the safe range.
export function toNumber(v) {
  if (typeof v === 'number') return v;
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) return Number.MAX_SAFE_INTEGER;
  if (v < BigInt(Number.MIN_SAFE_INTEGER)) return Number.MIN_SAFE_INTEGER;
  return Number(v);
}
