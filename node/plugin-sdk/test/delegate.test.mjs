// delegateExecutionBackendV4 against peers that break the protocol: the call fails and the peer is closed.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { delegateExecutionBackendV4, WorkerError } from '../src/index.mjs';

const context = () => ({ signal: new AbortController().signal, emitProcess() {}, invokeTool() {} });
const binding = { version: 4, root: '/tmp/wuu-delegate-test', session: 's' };

test('a peer line over the frame limit fails the peer', async () => {
  // 17 MiB without a newline: never a frame.
  const flood = "process.stdin.once('data', () => process.stdout.write('x'.repeat(17 * 1024 * 1024)))";
  const peer = delegateExecutionBackendV4({ command: [process.execPath, '-e', flood] });
  await assert.rejects(
    peer.initialize(binding, context()),
    (error) => error instanceof WorkerError && error.message === 'internal: the delegate peer was lost: the peer sent a frame over the limit',
  );
  await peer.close();
});

test('a peer that is not JSON fails the peer', async () => {
  const garbage = "process.stdin.once('data', () => process.stdout.write('hello\\n'))";
  const peer = delegateExecutionBackendV4({ command: [process.execPath, '-e', garbage] });
  await assert.rejects(peer.initialize(binding, context()), /the delegate peer was lost: the peer sent a malformed frame/);
  await peer.close();
});
