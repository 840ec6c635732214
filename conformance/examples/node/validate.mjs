// What the tools need beside the SDK's validation (every frame is checked against the spec by the SDK): its
// WorkerError, strict base64 and integers as Numbers.

import { WorkerError } from '../../../node/plugin-sdk/src/index.mjs';

export { WorkerError };

// Standard base64 with padding (RFC 4648 section 4); returns the decoded bytes.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
export function decodeBase64(v, path) {
  if (!BASE64.test(v)) throw new WorkerError('invalid_request', `${path}: must be standard base64 with padding`);
  return Buffer.from(v, 'base64');
}

// Converts a validated integer (Number or BigInt) into a Number, saturating at the safe range.
export function toNumber(v) {
  if (typeof v === 'number') return v;
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) return Number.MAX_SAFE_INTEGER;
  if (v < BigInt(Number.MIN_SAFE_INTEGER)) return Number.MIN_SAFE_INTEGER;
  return Number(v);
}
