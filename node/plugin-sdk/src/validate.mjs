// Checks values against the worker protocol's defs as `make generate` writes them from the spec
// (generated/node/schemas.mjs): Node workers accept and refuse exactly what the schemas say.
//
// `errors(name, value)` lists every error, each with the dotted path of the value it is about and, for a
// missing, unknown or misnamed field, that field's name (`field`); `check(name, value)` throws the first as
// a SchemaError naming the field. Values are as `json.mjs` parses them: an integer is a Number without a
// fraction or a BigInt, and a literal written with a fraction or an exponent is a JsonFloat, a number that is
// never an integer.

import { SCHEMAS } from '../../../generated/node/schemas.mjs';
import { JsonFloat } from './json.mjs';

export { SCHEMAS };

/** A value that its def refuses: `path` is the dotted field path ('' for the value itself). */
export class SchemaError extends Error {
  constructor(path, reason) {
    super(`${path || 'data'}: ${reason}`);
    this.name = 'SchemaError';
    this.path = path;
    this.reason = reason;
  }
}

/** Throw a SchemaError for the first way `value` breaks def `name`; return the value otherwise. */
export function check(name, value) {
  const [first] = errors(name, value);
  if (first) throw new SchemaError(fieldPath(first), first.reason);
  return value;
}

/** The dotted path of the field an error is about: the field it names, else the value's own. */
export const fieldPath = (error) => (error.field === undefined ? error.path : join(error.path, error.field));

/** Every way `value` breaks def `name`, as {path, reason, field?}. */
export function errors(name, value) {
  const schema = SCHEMAS[name];
  if (!schema) throw new Error(`no def named ${name} in the worker protocol`);
  const found = [];
  visit(schema, value, '', found);
  return found;
}

const join = (path, key) => (path === '' ? String(key) : `${path}.${key}`);
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof JsonFloat);
const isInteger = (v) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
const isNumber = (v) => (typeof v === 'number' && Number.isFinite(v)) || typeof v === 'bigint' || v instanceof JsonFloat;
const codePoints = (s) => [...s].length;
const compare = (a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0);
const numeric = (v) => (typeof v === 'bigint' || Number.isInteger(v) ? v : null);
const patterns = new Map();

function regex(pattern) {
  let compiled = patterns.get(pattern);
  if (!compiled) {
    compiled = new RegExp(pattern, 'u');
    patterns.set(pattern, compiled);
  }
  return compiled;
}

/** The JSON text of a value with sorted keys: equal values, equal text. */
export function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isObject(value)) {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  if (value instanceof JsonFloat) return JSON.stringify(value.value);
  return typeof value === 'bigint' ? value.toString() : JSON.stringify(value);
}

const TYPES = {
  string: (v) => typeof v === 'string',
  integer: isInteger,
  number: isNumber,
  boolean: (v) => typeof v === 'boolean',
  null: (v) => v === null,
  array: Array.isArray,
  object: isObject,
};

function visit(schema, value, path, found) {
  const fail = (reason, at = path, field = undefined) =>
    found.push(field === undefined ? { path: at, reason } : { path: at, field, reason });
  if (schema.$ref) visit(SCHEMAS[schema.$ref.slice('#/$defs/'.length)], value, path, found);
  if (schema.type !== undefined) {
    const kinds = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!kinds.some((kind) => TYPES[kind](value))) {
      fail(`must be ${kinds.join(' or ')}`);
      return;
    }
  }
  if ('const' in schema && canonical(value) !== canonical(schema.const)) fail(`must be ${JSON.stringify(schema.const)}`);
  if (schema.enum && !schema.enum.some((option) => canonical(option) === canonical(value))) {
    fail(`must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}`);
  }
  if (schema.oneOf) oneOf(schema.oneOf, value, path, found);
  if (schema.not) {
    const inner = [];
    visit(schema.not, value, path, inner);
    if (inner.length === 0) fail('must not match the excluded shape');
  }
  if (schema.if) {
    const inner = [];
    visit(schema.if, value, path, inner);
    const branch = inner.length === 0 ? schema.then : schema.else;
    if (branch) visit(branch, value, path, found);
  }
  if (typeof value === 'string') strings(schema, value, fail);
  else if (isNumber(value)) numbers(schema, value, fail);
  else if (Array.isArray(value)) arrays(schema, value, path, found, fail);
  else if (isObject(value)) objects(schema, value, path, found, fail);
}

function oneOf(options, value, path, found) {
  const failures = options.map((option) => {
    const inner = [];
    visit(option, value, path, inner);
    return inner;
  });
  const matched = failures.filter((inner) => inner.length === 0).length;
  if (matched === 1) return;
  if (matched > 1) {
    found.push({ path, reason: `matches ${matched} of its options, not exactly one` });
    return;
  }
  // The option whose own constants the value meets (a discriminator) says best what is wrong.
  const closest = failures.reduce((best, inner) => (inner.length < best.length ? inner : best));
  found.push({ path, reason: closest[0] ? `${fieldPath(closest[0]) || 'data'}: ${closest[0].reason}` : 'matches no option' });
  for (const inner of failures) found.push(...inner);
}

function strings(schema, value, fail) {
  if (schema.minLength !== undefined && codePoints(value) < schema.minLength) {
    fail(`must have at least ${schema.minLength} character(s)`);
  }
  if (schema.maxLength !== undefined && codePoints(value) > schema.maxLength) {
    fail(`must have at most ${schema.maxLength} character(s)`);
  }
  if (schema.pattern !== undefined && !regex(schema.pattern).test(value)) fail(`must match ${schema.pattern}`);
  const utf8 = schema['x-max-utf8-bytes'];
  if (utf8 !== undefined && Buffer.byteLength(value, 'utf8') > utf8) {
    fail(`${Buffer.byteLength(value, 'utf8')} UTF-8 bytes is over the limit of ${utf8}`);
  }
  const decoded = schema['x-max-decoded-bytes'];
  if (decoded !== undefined) {
    if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(value)) fail('is not valid base64');
    else if (Buffer.from(value, 'base64').length > decoded) fail(`decodes to more than ${decoded} bytes`);
  }
}

function numbers(schema, value, fail) {
  const n = numeric(value);
  const number = value instanceof JsonFloat ? value.value : Number(value);
  const exact = (limit) => typeof limit === 'bigint' || Number.isInteger(limit);
  const bound = (limit) => (n !== null && exact(limit) ? compare(n, limit) : Math.sign(number - Number(limit)));
  if (schema.minimum !== undefined && bound(schema.minimum) < 0) fail(`must be at least ${schema.minimum}`);
  if (schema.maximum !== undefined && bound(schema.maximum) > 0) fail(`must be at most ${schema.maximum}`);
  if (schema.exclusiveMinimum !== undefined && bound(schema.exclusiveMinimum) <= 0) {
    fail(`must be more than ${schema.exclusiveMinimum}`);
  }
}

function arrays(schema, value, path, found, fail) {
  if (schema.minItems !== undefined && value.length < schema.minItems) fail(`must have at least ${schema.minItems} item(s)`);
  if (schema.maxItems !== undefined && value.length > schema.maxItems) fail(`must have at most ${schema.maxItems} item(s)`);
  const prefix = schema.prefixItems || [];
  value.forEach((item, index) => {
    const itemSchema = index < prefix.length ? prefix[index] : schema.items;
    if (itemSchema === false) fail('is an item past the last one allowed', join(path, index));
    else if (itemSchema) visit(itemSchema, item, join(path, index), found);
  });
  if (schema.uniqueItems) {
    const seen = new Set();
    value.forEach((item, index) => {
      const key = canonical(item);
      if (seen.has(key)) fail('repeats an earlier item', path, index);
      seen.add(key);
    });
  }
  const sum = schema['x-max-sum'];
  if (sum) {
    const total = value.reduce((acc, item) => acc + (isObject(item) && isInteger(item[sum.property]) ? BigInt(item[sum.property]) : 0n), 0n);
    if (total > BigInt(sum.maximum)) fail(`the sum of \`${sum.property}\` is ${total}, over the limit of ${sum.maximum}`);
  }
}

function objects(schema, value, path, found, fail) {
  for (const name of schema.required || []) {
    if (!Object.hasOwn(value, name)) fail('is required', path, name);
  }
  for (const [trigger, needed] of Object.entries(schema.dependentRequired || {})) {
    if (!Object.hasOwn(value, trigger)) continue;
    for (const name of needed) {
      if (!Object.hasOwn(value, name)) fail(`is required with \`${trigger}\``, path, name);
    }
  }
  const properties = schema.properties || {};
  for (const [key, item] of Object.entries(value)) {
    const at = join(path, key);
    if (schema.propertyNames) {
      const inner = [];
      visit(schema.propertyNames, key, at, inner);
      if (inner.length) fail(`is not an allowed name: ${inner[0].reason}`, path, key);
    }
    if (Object.hasOwn(properties, key)) visit(properties[key], item, at, found);
    else if (schema.additionalProperties === false) fail('is an unknown field', path, key);
    else if (isObject(schema.additionalProperties)) visit(schema.additionalProperties, item, at, found);
  }
}
