/**
 * Strict YAML reading for fleet files: one document, unique keys, a bounded alias count,
 * and positions kept so every problem can name file:line:col.
 */
import { createRequire } from 'node:module';
import type { Document, Node } from 'yaml';
import { Reasons } from '../errors/catalogue.js';
import type { Problem } from './types.js';
import { parsePlainYaml } from './yaml-plain.js';

const require = createRequire(import.meta.url);
let yamlLib: typeof import('yaml') | null = null;
/** The YAML library, loaded when a file is outside the plain subset or a position is asked for (~50 ms to load). */
const lib = (): typeof import('yaml') => (yamlLib ??= require('yaml') as typeof import('yaml'));

export interface ParsedYaml {
  readonly file: string;
  readonly value: unknown;
  /** Position of the field at `path` (JSON-pointer segments), falling back to the nearest parent. */
  position(path: readonly (string | number)[], key?: boolean): { line: number; col: number };
}

const MAX_ALIASES = 100;

export function problem(
  file: string,
  pos: { line: number; col: number } | null,
  path: string,
  code: keyof typeof Reasons,
  message: string,
  hint?: string,
): Problem {
  return {
    file,
    line: pos?.line ?? null,
    col: pos?.col ?? null,
    path,
    code,
    message,
    hint: hint ?? Reasons[code].hint,
  };
}

function validPrefix(bytes: Uint8Array, n: number): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, n), { stream: true });
    return true;
  } catch {
    return false;
  }
}

export function decodeUtf8(file: string, bytes: Uint8Array): { text: string } | { problem: Problem } {
  try {
    const text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
    return { text };
  } catch {
    // the first invalid byte, by binary search over prefixes (a valid prefix's prefixes are valid):
    // O(n log n), where a byte-by-byte scan of a 256 KiB file decoded O(n²) bytes and stalled the loop
    let lo = 0;
    let hi = bytes.length;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (validPrefix(bytes, mid)) lo = mid;
      else hi = mid - 1;
    }
    const offset = lo;
    const line = new TextDecoder().decode(bytes.subarray(0, offset)).split('\n').length;
    return { problem: problem(file, { line, col: 1 }, '', 'SPEC_NOT_UTF8', `not valid UTF-8 text (first bad byte at offset ${offset})`) };
  }
}

export function parseYaml(file: string, text: string): { parsed: ParsedYaml } | { problems: Problem[] } {
  // Most fleet files are plain: read them without the library; positions (for problems) parse again with it.
  const plain = parsePlainYaml(text);
  if (plain) {
    let full: ParsedYaml | null = null;
    const position: ParsedYaml['position'] = (path, key) => {
      if (!full) {
        const r = parseWithLibrary(file, text);
        if ('problems' in r) return { line: 1, col: 1 }; // not reached: the plain subset is valid YAML
        full = r.parsed;
      }
      return full.position(path, key);
    };
    return { parsed: { file, value: plain.value, position } };
  }
  return parseWithLibrary(file, text);
}

function parseWithLibrary(file: string, text: string): { parsed: ParsedYaml } | { problems: Problem[] } {
  const { LineCounter, parseDocument } = lib();
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false, strict: true, version: '1.2' });
  const pos = (offset: number): { line: number; col: number } => lineCounter.linePos(offset);
  if (doc.errors.length > 0) {
    return {
      problems: doc.errors.map((e) => {
        const at = e.pos?.[0] ?? 0;
        const dup = e.code === 'DUPLICATE_KEY';
        const multi = e.code === 'MULTIPLE_DOCS' || /multiple documents/i.test(e.message);
        const message = dup
          ? `duplicate key: ${firstLine(e.message)}`
          : multi
            ? 'the file holds more than one YAML document'
            : `YAML syntax error: ${firstLine(e.message)}`;
        return problem(file, pos(at), '', dup ? 'SPEC_YAML_DUPLICATE_KEY' : 'SPEC_YAML_SYNTAX', message);
      }),
    };
  }
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: MAX_ALIASES });
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    if (/alias/i.test(msg)) {
      return { problems: [problem(file, { line: 1, col: 1 }, '', 'SPEC_YAML_ALIAS_LIMIT', `the file expands too many YAML aliases (limit ${MAX_ALIASES}): ${msg}`)] };
    }
    return { problems: [problem(file, { line: 1, col: 1 }, '', 'SPEC_YAML_SYNTAX', `YAML error: ${msg}`)] };
  }
  return { parsed: { file, value, position: (path, key) => findPosition(doc, path, key === true, pos) } };
}

function firstLine(s: string): string {
  return s.split('\n')[0] ?? s;
}

function findPosition(
  doc: Document,
  path: readonly (string | number)[],
  wantKey: boolean,
  pos: (offset: number) => { line: number; col: number },
): { line: number; col: number } {
  const { isMap, isSeq, isPair, isScalar } = lib();
  let node: unknown = doc.contents;
  let best: { line: number; col: number } = node && (node as Node).range ? pos((node as Node).range![0]) : { line: 1, col: 1 };
  for (let i = 0; i < path.length; i++) {
    const seg = path[i];
    const last = i === path.length - 1;
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(seg));
      if (!pair) return best;
      const keyNode = pair.key as Node;
      if (keyNode.range) best = pos(keyNode.range[0]);
      if (last && wantKey) return best;
      node = pair.value;
    } else if (isSeq(node)) {
      const item = node.items[Number(seg)];
      node = item;
    } else {
      return best;
    }
    const n = node as Node | null | undefined;
    if (n && n.range) best = pos(n.range[0]);
  }
  return best;
}
