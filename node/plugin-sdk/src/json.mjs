// JSON as the worker protocol needs it: integers exact (a literal beyond Number's exact range is a BigInt)
// and a literal written with a fraction or an exponent (`4.0`, `1e3`) kept apart as a JsonFloat, which is
// never an integer (the spec's `integer` fields refuse it). `plain` turns a checked value into the plain
// numbers a provider works with; `stringify` writes BigInts as the integers they are.

/** A number written with a fraction or an exponent. */
export class JsonFloat {
  constructor(value) {
    this.value = value;
  }
}

/** A parse failure, saying where. */
export class JsonSyntaxError extends Error {}

const WHITESPACE = new Set([' ', '\t', '\n', '\r']);
const ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** Parse one JSON text. */
export function parse(text) {
  let at = 0;
  const fail = (what) => {
    throw new JsonSyntaxError(`${what} at offset ${at}`);
  };
  const skip = () => {
    while (WHITESPACE.has(text[at])) at++;
  };
  const value = () => {
    skip();
    const char = text[at];
    if (char === '{') return object();
    if (char === '[') return array();
    if (char === '"') return string();
    if (char === '-' || (char >= '0' && char <= '9')) return number();
    for (const [word, result] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return result;
      }
    }
    return fail('unexpected input');
  };
  const object = () => {
    at++;
    const result = {};
    skip();
    if (text[at] === '}') {
      at++;
      return result;
    }
    for (;;) {
      skip();
      if (text[at] !== '"') fail('expected a key');
      const key = string();
      skip();
      if (text[at] !== ':') fail("expected ':'");
      at++;
      // A repeated key keeps its last value, as JSON.parse does; defineProperty keeps `__proto__` a key.
      Object.defineProperty(result, key, { value: value(), enumerable: true, writable: true, configurable: true });
      skip();
      if (text[at] === ',') at++;
      else if (text[at] === '}') {
        at++;
        return result;
      } else fail("expected ',' or '}'");
    }
  };
  const array = () => {
    at++;
    const result = [];
    skip();
    if (text[at] === ']') {
      at++;
      return result;
    }
    for (;;) {
      result.push(value());
      skip();
      if (text[at] === ',') at++;
      else if (text[at] === ']') {
        at++;
        return result;
      } else fail("expected ',' or ']'");
    }
  };
  const string = () => {
    at++;
    let out = '';
    let start = at;
    for (;;) {
      const char = text[at];
      if (char === undefined) fail('unterminated string');
      if (char === '"') {
        out += text.slice(start, at);
        at++;
        return out;
      }
      if (char < ' ') fail('a control character in a string');
      if (char === '\\') {
        out += text.slice(start, at);
        const escape = text[at + 1];
        if (escape === 'u') {
          const hex = text.slice(at + 2, at + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('a bad \\u escape');
          out += String.fromCharCode(parseInt(hex, 16));
          at += 6;
        } else if (escape in ESCAPES) {
          out += ESCAPES[escape];
          at += 2;
        } else fail('a bad escape');
        start = at;
      } else at++;
    }
  };
  const number = () => {
    NUMBER.lastIndex = at;
    const match = NUMBER.exec(text);
    if (!match) fail('a bad number');
    at += match[0].length;
    if (match[1] !== undefined || match[2] !== undefined) return new JsonFloat(Number(match[0]));
    const n = Number(match[0]);
    return Number.isSafeInteger(n) ? n : BigInt(match[0]);
  };
  const result = value();
  skip();
  if (at !== text.length) fail('text after the value');
  return result;
}

/** A checked value with every JsonFloat a plain number (BigInts stay: they are exact). */
export function plain(value) {
  if (value instanceof JsonFloat) return value.value;
  if (Array.isArray(value)) return value.map(plain);
  if (value !== null && typeof value === 'object') {
    const out = {};
    for (const [key, item] of Object.entries(value)) {
      Object.defineProperty(out, key, { value: plain(item), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}

/** JSON text of a value; a BigInt is written as its integer. */
export function stringify(value) {
  return JSON.stringify(value, (_, item) => (typeof item === 'bigint' ? BIG.wrap(item) : item)).replace(BIG.pattern, '$1');
}

// A BigInt travels through JSON.stringify as a marked string, then loses its quotes and mark.
const BIG = {
  mark: '\u0000bigint:',
  wrap: (n) => `\u0000bigint:${n}`,
  pattern: /"\\u0000bigint:(-?\d+)"/g,
};
