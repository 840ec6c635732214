// Strict JSON text <-> value conversion for the worker protocol.
//
// JSON.parse cannot tell 9223372036854775807 from 9223372036854775808 (both become the same
// double), yet the protocol bounds many integers by the signed 64-bit range. This parser keeps
// every integer literal exactly: a safe integer becomes a Number, a larger one a BigInt.
// Objects are created without a prototype, so a key such as "__proto__" is an ordinary key.

import { randomBytes } from 'node:crypto';

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
const CONTROL = /[\u0000-\u001f]/;

export function parseJson(text) {
  let i = 0;
  const n = text.length;

  const fail = (what) => {
    throw new SyntaxError(`${what} at offset ${i}`);
  };

  const skipWs = () => {
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };

  const parseString = () => {
    // text[i] === '"'
    let j = i + 1;
    let end;
    for (;;) {
      const k = text.indexOf('"', j);
      if (k < 0) fail('unterminated string');
      let backslashes = 0;
      for (let b = k - 1; b > i && text.charCodeAt(b) === 0x5c; b--) backslashes++;
      if (backslashes % 2 === 0) {
        end = k;
        break;
      }
      j = k + 1;
    }
    const raw = text.slice(i, end + 1);
    i = end + 1;
    if (raw.indexOf('\\') < 0) {
      if (CONTROL.test(raw)) fail('control character in string');
      return raw.slice(1, -1);
    }
    return JSON.parse(raw); // validates escapes and control characters
  };

  const parseNumber = () => {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) fail('unexpected character');
    i = NUMBER.lastIndex;
    const lexeme = m[0];
    if (m[1] !== undefined || m[2] !== undefined) {
      // A fraction or an exponent is never an integer on the wire (4.0 is not 4): box it, so that the
      // strict integer check refuses it. No field of the protocol takes a non-integer number.
      return Object(Number(lexeme));
    }
    const digits = lexeme.startsWith('-') ? lexeme.length - 1 : lexeme.length;
    if (digits <= 15) return Number(lexeme);
    const big = BigInt(lexeme);
    if (big <= BigInt(Number.MAX_SAFE_INTEGER) && big >= BigInt(Number.MIN_SAFE_INTEGER)) {
      return Number(big);
    }
    return big;
  };

  const parseLiteral = (word, value) => {
    if (text.startsWith(word, i)) {
      i += word.length;
      return value;
    }
    return fail('unexpected character');
  };

  const parseValue = () => {
    skipWs();
    if (i >= n) fail('unexpected end of text');
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = Object.create(null);
      skipWs();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        skipWs();
        if (text[i] !== '"') fail('expected a string key');
        const key = parseString();
        skipWs();
        if (text[i] !== ':') fail("expected ':'");
        i++;
        obj[key] = parseValue();
        skipWs();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return obj;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      skipWs();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(parseValue());
        skipWs();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return arr;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return parseString();
    if (c === 't') return parseLiteral('true', true);
    if (c === 'f') return parseLiteral('false', false);
    if (c === 'n') return parseLiteral('null', null);
    return parseNumber();
  };

  const value = parseValue();
  skipWs();
  if (i !== n) fail('trailing characters');
  return value;
}

const NONCE = randomBytes(12).toString('hex');
const BIGINT_MARK = new RegExp(`"\\\\u0000${NONCE}(-?[0-9]+)"`, 'g');

// JSON.stringify that writes BigInt values as exact integer literals.
export function toJson(value) {
  let sawBig = false;
  const text = JSON.stringify(value, (_key, v) => {
    if (typeof v === 'bigint') {
      sawBig = true;
      return `\u0000${NONCE}${v}`;
    }
    return v;
  });
  return sawBig ? text.replace(BIGINT_MARK, '$1') : text;
}
