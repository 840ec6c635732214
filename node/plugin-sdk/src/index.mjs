// @wuu/plugin-sdk: the v4 execution-worker protocol for Node.js providers.

export { delegateExecutionBackendV4 } from './delegate.mjs';
export { ERROR_CODES, WorkerError } from './errors.mjs';
export { checked, runExecutionBackendV4, toolArguments } from './run.mjs';
export { check, errors, SchemaError } from './validate.mjs';
