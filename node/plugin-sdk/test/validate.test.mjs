// The validator against the spec's own examples (spec/examples/worker): every valid instance of a def passes,
// and every invalid one is refused with an error at the field the example names. The Python validators and
// models are held to the same examples (tests/spec/test_spec_examples.py).

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { parse } from '../src/json.mjs';
import { check, errors, fieldPath, SchemaError, SCHEMAS } from '../src/validate.mjs';

const EXAMPLES = fileURLToPath(new URL('../../../spec/examples/worker/', import.meta.url));
const files = readdirSync(EXAMPLES).filter((name) => name.endsWith('.json')).sort();
const defs = files.map((file) => file.replace(/\.json$/, '')).filter((name) => name in SCHEMAS);

test('the worker examples name defs of the protocol', () => {
  assert.ok(defs.length >= 40, `only ${defs.length} of ${files.length} example files name a def`);
});

for (const name of defs) {
  const examples = JSON.parse(readFileSync(`${EXAMPLES}${name}.json`, 'utf8'));
  test(`${name}: the valid examples pass`, () => {
    for (const example of examples.valid || []) {
      assert.deepEqual(errors(name, example.instance), [], example.description);
    }
  });
  test(`${name}: the invalid examples are refused at their field`, () => {
    for (const example of examples.invalid || []) {
      // As the Python validators locate errors: the value's path, and the field a missing, unknown or
      // misnamed-field error names.
      const paths = errors(name, example.instance).flatMap((error) => [error.path, fieldPath(error)]);
      assert.ok(paths.includes(example.field), `${example.description}: ${example.field} not in ${JSON.stringify(paths)}`);
    }
  });
}

test('check throws the first error, naming the field', () => {
  assert.throws(
    () => check('ProcessReadParams', { Process: 'p', max_bytes: 1 }),
    (error) => error instanceof SchemaError && error.path === 'max_bytes' && error.message === 'max_bytes: is an unknown field',
  );
  assert.throws(() => check('InitializeParams', { version: 4, root: 'relative', session: 's' }), /^SchemaError: root: must match/);
  assert.equal(check('CancelParams', { id: 'h1' }).id, 'h1');
});

test('integers are exact: BigInt beyond 2^53, and bounds compared as integers', () => {
  assert.deepEqual(errors('ProcessReadParams', { Process: 'p', OffsetBytes: 9007199254740993n }), []);
  const over = errors('ProcessReadParams', { Process: 'p', OffsetBytes: 9223372036854775808n });
  assert.deepEqual(over.map(fieldPath), ['OffsetBytes']);
  assert.deepEqual(errors('ProcessReadParams', { Process: 'p', OffsetBytes: 1.5 }).map(fieldPath), ['OffsetBytes']);
  const written = parse('{"Process": "p", "OffsetBytes": 4.0}');
  assert.deepEqual(errors('ProcessReadParams', written).map(fieldPath), ['OffsetBytes'], '4.0 is not an integer');
});
