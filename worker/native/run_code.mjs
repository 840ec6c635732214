// The interpreter side of run_code (worker/native/run_code.py; spec: export.schema.json, RunCodeParams).
//
// The worker starts `node --permission` on this file: the program gets no file system, child process or
// worker thread of its own, and acts only through `tools`, each call a `tool/invoke` of the parent request.
// Messages to the worker are JSON lines on the fd named by WUU_RUN_CODE_FD; the worker's are JSON lines on stdin. What the program
// prints (stdout and stderr) is its output, and never mixes with the messages.
//
//   worker -> program: {"source": S, "state": {...}}, then {"id": N, "result": ToolResult} or {"id": N, "error": E}
//   program -> worker: {"call": {"id": N, "tool": T, "arguments": {...}}}, then one
//                      {"done": {"value": V, "has_value": B, "error": E | null, "state": {...}}}

import fs from 'node:fs';
import readline from 'node:readline';

const MESSAGES = Number(process.env.WUU_RUN_CODE_FD);
const send = (message) => fs.writeSync(MESSAGES, JSON.stringify(message) + '\n');

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const waiting = new Map();
let started = null;
let calls = 0;

lines.on('line', (line) => {
  const message = JSON.parse(line);
  if (started === null) {
    started = message;
    run(message);
    return;
  }
  const pending = waiting.get(message.id);
  waiting.delete(message.id);
  if (pending === undefined) return;
  if (message.error !== undefined) pending.reject(new Error(message.error));
  else pending.resolve(message.result);
});

// `tools.read_file({path: 'a.txt'})` resolves to the tool's result ({output, is_error, metadata}).
const tools = new Proxy({}, {
  get(_, tool) {
    // Not `then`: `tools` is no promise, so `await tools` is not a tool call.
    if (typeof tool !== 'string' || tool === 'then') return undefined;
    return (args = {}) => new Promise((resolve, reject) => {
      const id = ++calls;
      waiting.set(id, { resolve, reject });
      send({ call: { id, tool, arguments: args } });
    });
  },
});

async function run({ source, state }) {
  const AsyncFunction = (async () => {}).constructor;
  let outcome;
  try {
    const program = new AsyncFunction('tools', 'state', source);
    const value = await program(tools, state);
    outcome = { value: value === undefined ? null : value, has_value: value !== undefined, error: null };
  } catch (error) {
    outcome = { value: null, has_value: false, error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) };
  }
  try {
    send({ done: { ...outcome, value: JSON.parse(JSON.stringify(outcome.value ?? null)), state } });
  } catch (error) {
    send({ done: { value: null, has_value: false, error: `the result or the state is not JSON: ${error.message}`, state: null } });
  }
  lines.close();
  process.stdin.destroy();
}
