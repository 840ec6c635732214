// A partial backend: every method goes to a peer worker, and each `execute` is written to an audit log on
// stderr first. Run as `node audited-worker.mjs PEER-COMMAND...`, e.g. `node audited-worker.mjs python -m wuu.worker`.

import { delegateExecutionBackendV4, runExecutionBackendV4 } from '../src/index.mjs';

const peer = delegateExecutionBackendV4({ command: process.argv.slice(2), capabilities: ['process.start.v1'] });

await runExecutionBackendV4({
  ...peer,
  methods: {
    ...peer.methods,
    async execute(request, context) {
      process.stderr.write(`audit: ${request.actor.kind} ${request.actor.id} runs ${request.tool}\n`);
      return peer.methods.execute(request, context);
    },
  },
});
