// The SDK's API for TypeScript, over the protocol's types that `make generate` writes from the spec.

import type {
  ErrorCode,
  InitializeParams,
  ProcessEvent,
  ToolResult,
  WorkerInfo,
  WorkerMethods,
} from '../../../generated/node/protocol.js';

/** What a handler gets beside its params. */
export interface RequestContext {
  readonly id: string;
  readonly method: string;
  /** The pinned binding (for `initialize`: the binding being established). */
  readonly binding: InitializeParams;
  /** Aborts when this request is cancelled or the connection ends. */
  readonly signal: AbortSignal;
  /** Aborts when the connection ends: the lifetime of detached work such as background processes. */
  readonly lifetimeSignal: AbortSignal;
  readonly grantedCapabilities: ReadonlySet<string>;
  /** Publish a `process/event` notification on this connection. */
  emitProcess(event: ProcessEvent): void;
  /** Call a tool back through the host (`tool/invoke`), only while this request is live. */
  invokeTool(tool: string, args: Record<string, unknown>): Promise<ToolResult>;
}

type HostMethod = {
  [M in keyof WorkerMethods]: M extends 'initialize' | 'cancel' | 'tool/invoke' | 'process/event' ? never : M;
}[keyof WorkerMethods];

/** A method's handler: its params and context to its result (or a promise of it). */
export type Handler<M extends HostMethod> = ((
  params: WorkerMethods[M]['params'],
  context: RequestContext,
) => WorkerMethods[M]['result'] | Promise<WorkerMethods[M]['result']>) & { available?: () => boolean };

/** A provider: what `runExecutionBackendV4` serves. A method it omits is answered `unsupported_method`. */
export interface ExecutionBackendV4 {
  initialize(binding: InitializeParams, context: RequestContext): Promise<void> | void;
  methods: { [M in HostMethod]?: Handler<M> };
  close(): Promise<void> | void;
  /** Those the provider honours; `process.start.v1` needs `process/start`, `process/list` and `close`. */
  capabilities?: string[];
  info?: WorkerInfo;
}

/** Serve `backend` on stdio until the connection ends; the process's exit code. */
export function runExecutionBackendV4(
  backend: ExecutionBackendV4,
  streams?: { input?: unknown; output?: unknown },
): Promise<number>;

/** A backend that forwards every method to the peer worker `command`, started at `initialize`. */
export function delegateExecutionBackendV4(options: {
  command: string[];
  capabilities?: string[];
  env?: Record<string, string>;
  /** The peer's exit budget after EOF, 1 to 2,147,483,647 ms (default 10 s). */
  shutdown_grace_ms?: number;
}): ExecutionBackendV4 & { methods: { [M in HostMethod]: Handler<M> } };

/** The arguments of an `execute` request, checked against the core tool's arguments def. */
export function toolArguments(request: WorkerMethods['execute']['params']): Record<string, unknown>;

/** An error with a protocol code; a handler throws one to answer with it. */
export class WorkerError extends Error {
  constructor(code: ErrorCode, message?: string);
  readonly code: ErrorCode;
  readonly detail: string;
  readonly wire: string;
  static fromWire(text: string): WorkerError;
}

export const ERROR_CODES: readonly ErrorCode[];
