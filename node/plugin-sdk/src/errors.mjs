// The worker protocol's errors: a reply's `error` is a string, `code` or `code: message`
// (spec/schema/worker/errors.schema.json, ErrorCode).

import { SCHEMAS } from '../../../generated/node/schemas.mjs';

/** The error codes of the spec. */
export const ERROR_CODES = Object.freeze([...SCHEMAS.ErrorCode.enum]);

/** `text` with each line terminator a space: an error string is one line. */
export const oneLine = (text) => text.replace(/[\r\n\u2028\u2029]/g, ' ');

/** An error with a protocol code; a handler throws one to answer with it. */
export class WorkerError extends Error {
  constructor(code, message = '') {
    super(message ? `${code}: ${message}` : code);
    this.name = 'WorkerError';
    this.code = code;
    this.detail = message;
  }

  /** The reply's `error` string, on one line as the spec's ErrorString is. */
  get wire() {
    return oneLine(this.message);
  }

  /** A peer's error string as a WorkerError (`internal` for a code the spec does not know). */
  static fromWire(text) {
    const split = text.indexOf(':');
    const code = split < 0 ? text : text.slice(0, split);
    const message = split < 0 ? '' : text.slice(split + 1).trimStart();
    return ERROR_CODES.includes(code) ? new WorkerError(code, message) : new WorkerError('internal', text);
  }
}
