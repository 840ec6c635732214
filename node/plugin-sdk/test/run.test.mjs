// The SDK's connection rules, on a real worker process over real pipes (fixtures/rules-worker.mjs).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('./fixtures/rules-worker.mjs', import.meta.url));

function start() {
  const directory = mkdtempSync(join(tmpdir(), 'wuu-sdk-'));
  const marker = join(directory, 'marker');
  const child = spawn(process.execPath, [WORKER], {
    env: { ...process.env, WUU_TEST_MARKER: marker },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const frames = [];
  const waiters = [];
  let buffered = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    let newline;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      frames.push(JSON.parse(buffered.slice(0, newline)));
      buffered = buffered.slice(newline + 1);
      for (const waiter of waiters.splice(0)) waiter();
    }
  });
  const exited = new Promise((resolve) => child.once('close', (code) => resolve(code)));
  const send = (frame) => child.stdin.write(typeof frame === 'string' ? frame : `${JSON.stringify(frame)}\n`);
  const next = async (match) => {
    for (;;) {
      const index = frames.findIndex(match);
      if (index >= 0) return frames.splice(index, 1)[0];
      await new Promise((resolve) => waiters.push(resolve));
    }
  };
  const request = async (id, method, data, token = 't') => {
    send({ id, method, token, data });
    return next((frame) => frame.id === id && !('method' in frame));
  };
  return { child, directory, marker, exited, send, next, request };
}

const call = (id, tool, args = {}) => ({
  tool,
  call: { id, arguments: JSON.stringify(args) },
  actor: { kind: 'agent', id: 'a1' },
  permission_mode: 'standard',
});

test('the connection rules', async (t) => {
  const worker = start();
  t.after(() => worker.child.kill('SIGKILL'));
  const root = join(worker.directory, 'ws');
  assert.deepEqual(await worker.request('h0', 'execute', call('c', 'echo', { text: 'x' })), {
    id: 'h0',
    error: 'not_initialized: execute before initialize',
  });
  const init = await worker.request('h1', 'initialize', { version: 4, root, session: 's', capabilities: ['process.start.v1'] });
  assert.deepEqual(init.data.capabilities, [], 'no process/list: process.start.v1 is not granted');
  assert.deepEqual(init.data.methods, ['cancel', 'execute', 'initialize', 'process/start']);
  assert.equal((await worker.request('h2', 'execute', call('c', 'echo', { text: 'hello' }))).data.output, 'hello');
  assert.equal((await worker.request('h3', 'process/list', {})).error, 'unsupported_method: process/list');
  assert.equal((await worker.request('h4', 'execute', call('c', 'echo'), 'other')).error.split(':')[0], 'token_mismatch');
  assert.equal((await worker.request('h5', 'execute', { tool: 'echo' })).error, 'invalid_request: call: is required');
  assert.equal((await worker.request('h6', 'execute', call('c', 'offspec'))).error, 'internal: execute result: output: must be string');
  const again = await worker.request('h7', 'initialize', { version: 4, root: `${root}-2`, session: 's' });
  assert.equal(again.error.split(':')[0], 'binding_immutable');

  worker.send({ id: 'h8', method: 'execute', token: 't', data: call('c', 'slow') });
  assert.deepEqual(await worker.request('h9', 'cancel', { id: 'h8' }), { id: 'h9', data: { cancelled: true } });
  assert.deepEqual(await worker.next((frame) => frame.id === 'h8'), { id: 'h8', error: 'cancelled' });

  worker.send({ id: 'h10', method: 'execute', token: 't', data: call('c', 'callback', { tool: 'read_file' }) });
  const callback = await worker.next((frame) => frame.method === 'tool/invoke');
  assert.equal(callback.parent, 'h10');
  assert.deepEqual(callback.data, { tool: 'read_file', arguments: '{"from":"worker"}' });
  worker.send({ id: callback.id, data: { output: 'hi', is_error: false } });
  assert.equal((await worker.next((frame) => frame.id === 'h10')).data.output, 'host said: hi');

  worker.send({ id: 'h13', method: 'execute', token: 't', data: call('c', 'callback', { tool: 'read_file' }) });
  await worker.next((frame) => frame.method === 'tool/invoke' && frame.parent === 'h13');
  assert.deepEqual(await worker.request('h14', 'cancel', { id: 'h13' }), { id: 'h14', data: { cancelled: true } });
  assert.deepEqual(await worker.next((frame) => frame.id === 'h13'), { id: 'h13', error: 'cancelled' }, 'no wait for the host');

  worker.send({ id: 'h11', method: 'execute', token: 't', data: call('c', 'slow') });
  worker.send('{"id": "h12", "method": 42}\n'); // malformed: no reply; the slow request is cancelled and drained
  assert.equal(await worker.exited, 0);
  assert.deepEqual(await worker.next((frame) => frame.id === 'h11'), { id: 'h11', error: 'cancelled' });
  assert.equal(readFileSync(worker.marker, 'utf8'), 'closed');
});
