/**
 * A fast reader for the plain subset of YAML that fleet files are mostly written in: block mappings
 * of plain keys, plain scalars, one-level flow sequences and mappings of plain scalars, comments.
 * At 1,000 model files the YAML library's parse was over half of `llmgw validate`'s time (~0.2 ms a
 * small file). Anything outside the subset — quotes, block sequences, anchors, tags, tabs, non-ASCII,
 * a duplicate key, a scalar whose type is not plainly a string or a decimal integer — returns null,
 * and the caller parses the file with the library as before: this reader never decides what a
 * document means where the library could decide otherwise (yaml-plain.test.ts checks it against the
 * library on generated documents).
 */

/** A key the reader takes: a name, never `<<` or `__proto__`. */
const KEY = /^[A-Za-z_][A-Za-z0-9_-]*$/;
/** A block plain scalar the reader takes: starts with a letter, digit, `_` or `/`; no `#`, quotes or flow indicators. */
const PLAIN = /^[A-Za-z0-9_/][A-Za-z0-9_./:@+=?&%~-]*$/;
/** Inside a flow collection: the same, and no `:` (a flow key's indicator). */
const FLOW_PLAIN = /^[A-Za-z0-9_/][A-Za-z0-9_./@+=?&%~-]*$/;
const DECIMAL = /^(0|[1-9][0-9]{0,14})$/;
/** Tokens YAML 1.2's core schema reads as something other than a string (or that look close enough to bail). */
const NOT_A_STRING = /^(?:~|null|Null|NULL|true|True|TRUE|false|False|FALSE|[-+]?[0-9._]*(?:[eE][-+]?[0-9]+)?|0x[0-9a-fA-F]+|0o[0-7]+|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/;
const KEY_SEP = '__proto__';

type Value = string | number | null | Value[] | { [k: string]: Value };

/** The scalar a plain token stands for, or undefined when the reader does not decide it. */
function scalar(token: string, flow: boolean): string | number | undefined {
  // a trailing ":" would make the token a key of a nested mapping
  if (!(flow ? FLOW_PLAIN : PLAIN).test(token) || token.endsWith(':')) return undefined;
  if (DECIMAL.test(token)) return Number(token);
  if (NOT_A_STRING.test(token)) return undefined;
  return token;
}

/** `[a, b]` or `{ k: v, … }` of plain scalars, or undefined. */
function flow(text: string): Value[] | { [k: string]: Value } | undefined {
  const open = text[0];
  const close = open === '[' ? ']' : '}';
  if (text[text.length - 1] !== close) return undefined;
  const inner = text.slice(1, -1).trim();
  const items = inner === '' ? [] : inner.split(',').map((s) => s.trim());
  if (items.some((s) => s === '')) return undefined; // `[a,,b]`, a trailing comma: the library's call
  if (open === '[') {
    const out: Value[] = [];
    for (const item of items) {
      const v = scalar(item, true);
      if (v === undefined) return undefined;
      out.push(v);
    }
    return out;
  }
  const out: { [k: string]: Value } = {};
  for (const item of items) {
    const m = /^([A-Za-z_][A-Za-z0-9_-]*): +(.+)$/.exec(item);
    if (!m || m[1] === KEY_SEP || NOT_A_STRING.test(m[1]!) || Object.hasOwn(out, m[1]!)) return undefined;
    const v = scalar(m[2]!, true);
    if (v === undefined) return undefined;
    out[m[1]!] = v;
  }
  return out;
}

/** The value after `key:` on its line (comment removed), or undefined. */
function inlineValue(rest: string): Value | undefined {
  const text = rest.replace(/ +#.*$/, '').trimEnd();
  if (text.includes('#')) return undefined;
  if (text[0] === '[' || text[0] === '{') return flow(text);
  return scalar(text, false);
}

/** The document's value when it is in the subset (`{ value }`), else null. */
export function parsePlainYaml(text: string): { value: unknown } | null {
  if (/[^\x20-\x7e\n]/.test(text)) return null; // tabs, CR, non-ASCII: the library's
  const lines: { indent: number; key: string; rest: string }[] = [];
  for (const line of text.split('\n')) {
    const body = line.trimStart();
    if (body === '' || body[0] === '#') continue;
    const m = /^([^:\s]+):(?: +(.*))?$/.exec(body);
    if (!m || !KEY.test(m[1]!) || m[1] === KEY_SEP || NOT_A_STRING.test(m[1]!)) return null;
    lines.push({ indent: line.length - body.length, key: m[1]!, rest: (m[2] ?? '').trimEnd() });
  }
  if (lines.length === 0) return text.trim() === '' ? { value: null } : null;
  let at = 0;
  const block = (indent: number): { [k: string]: Value } | undefined => {
    const out: { [k: string]: Value } = {};
    while (at < lines.length && lines[at]!.indent === indent) {
      const { key, rest } = lines[at++]!;
      if (Object.hasOwn(out, key)) return undefined;
      const bare = rest === '' || rest[0] === '#';
      if (!bare) {
        const v = inlineValue(rest);
        if (v === undefined) return undefined;
        out[key] = v;
      } else if (at < lines.length && lines[at]!.indent > indent) {
        const v = block(lines[at]!.indent);
        if (v === undefined) return undefined;
        out[key] = v;
      } else out[key] = null;
    }
    return out;
  };
  if (lines[0]!.indent !== 0) return null;
  const value = block(0);
  // a line left over is indented oddly (less than its block, but more than the enclosing one)
  return value === undefined || at !== lines.length ? null : { value };
}
