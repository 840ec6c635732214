// Compiled by `tsc --noEmit` in make test (never run): a provider written in TypeScript type-checks against the
// SDK's declarations and the generated protocol types, and a wrong result type does not.

import { runExecutionBackendV4, WorkerError, type ExecutionBackendV4 } from '../src/index.mjs';

const backend: ExecutionBackendV4 = {
  async initialize(binding) {
    binding.root.startsWith('/');
  },
  methods: {
    async execute(request, context) {
      if (context.signal.aborted) throw new WorkerError('cancelled');
      return { output: request.tool, is_error: false };
    },
    'process/list': () => ({ processes: [] }),
    // @ts-expect-error: a process/get result is an ExecutionProcessV4, not a string
    'process/get': () => 'no',
  },
  close() {},
  capabilities: ['process.start.v1'],
};

await runExecutionBackendV4(backend);
