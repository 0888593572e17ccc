/**
 * The plain-subset YAML reader (src/fleet-spec/yaml-plain.ts) against the YAML library, with the
 * options the loader uses: on generated documents full of tokens whose type YAML decides in
 * surprising ways, whenever the reader answers, the library parses the document without an error to
 * the same value (the reader may decline anything). And it does answer for the files fleets are
 * made of (so the fast path is taken).
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { parseDocument } from 'yaml';
import { parsePlainYaml } from '../../src/fleet-spec/yaml-plain.js';
import { minimalFleet } from '../harness/fleet.js';
import { invalidCases } from '../fixtures/invalid-fleets.js';

function library(text: string): { ok: true; value: unknown } | { ok: false } {
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: false, strict: true, version: '1.2' });
  if (doc.errors.length > 0) return { ok: false };
  try {
    return { ok: true, value: doc.toJS({ maxAliasCount: 100 }) };
  } catch {
    return { ok: false };
  }
}

function agrees(text: string): boolean {
  const fast = parsePlainYaml(text);
  if (fast === null) return false;
  const lib = library(text);
  assert.ok(lib.ok, `the reader answered for a document the library refuses:\n${text}`);
  assert.deepStrictEqual(fast.value, lib.value, `different values for:\n${text}`);
  return true;
}

const KEYS = ['a', 'b_c', 'x-y', 'model', 'true', 'True', 'null', 'Null', '~', '__proto__', 'constructor', 'toString', '<<', 'on', 'yes', '1', '01', 'a b', 'a:b', '-a', '_', 'A9'];
const TOKENS = [
  '1', '0', '01', '00', '-1', '+1', '1e3', '1E3', '1e', '1.5', '.5', '5.', '0x1F', '0X1F', '0o17', '0b1', '1_000', '12:30', '1:2:3', '15m', '1GiB', '4096', '999999999999999', '9999999999999999', '123456789012345678901',
  'hf://org/x-GGUF/x.gguf', 'https://a.b/c?d=e&f=g', 'file:///srv/m.gguf', 'a:b', 'abc:', 'a::', 'a#b', 'a #b', 'a  #b', 'x # c',
  'true', 'True', 'TRUE', 'tRUE', 'yes', 'no', 'on', 'off', 'y', 'null', 'Null', 'NULL', 'nULL', '~', 'a~', '~a',
  '.inf', '-.inf', '+.INF', '.nan', '.NaN', 'NaN', 'inf', 'Infinity', '.', '..', '...',
  '[a, b]', '[]', '[ ]', '[a]', '[1, 2]', '[true]', '[a,b]', '[ a , b ]', '{}', '{ }', '{ a: 1 }', '{a: 1}', '{ a: b, c: 15m }', '{ a: 1, a: 2 }', '{ a: }', '{ true: 1 }',
  '[a,,b]', '[a, b,]', '[[a]]', '[a: b]', '[a # c]', '[a] # c', '{ a: [b] }', '[a, "b"]',
  '"q"', "'q'", '&x a', '*x', '!t a', '!!str 1', '|', '>', '|-', '- a', 'a b', 'a  b', '', '#c', '%x', '@x', '`x', '/abs/path', '_u', '-', '?x', 'a?b', 'a=b', 'a%b', 'a,b', 'a]', 'a}', 'a&b', 'a*b', 'a!b', 'a|b',
];
const INDENTS = [0, 0, 0, 2, 2, 4, 1, 3];
const line = fc.oneof(
  { weight: 8, arbitrary: fc.tuple(fc.constantFrom(...INDENTS), fc.constantFrom(...KEYS), fc.constantFrom(...TOKENS)).map(([i, k, v]) => `${' '.repeat(i)}${k}:${v === '' ? '' : ` ${v}`}`) },
  { weight: 1, arbitrary: fc.constantFrom('', '# a comment', '  # indented comment', '---', '...', '- item', '  - item', 'key:value', 'key :v', 'k:  v  ', '\tk: v', 'k: v\r', 'k: é', 'just text', 'k:\t1', '%YAML 1.2') },
);
const doc = fc.array(line, { minLength: 0, maxLength: 8 }).map((ls) => ls.join('\n') + '\n');

describe('the plain-subset YAML reader', () => {
  it('where it answers, the library agrees (generated documents)', (t) => {
    let answered = 0;
    let runs = 0;
    fc.assert(
      fc.property(doc, (text) => {
        runs++;
        if (agrees(text)) answered++;
      }),
      { numRuns: 20_000 },
    );
    t.diagnostic(`the reader answered ${answered} of ${runs} generated documents`);
    assert.ok(answered > runs * 0.02, `the reader answered ${answered} of ${runs} documents`);
  });

  it('every file of the fixtures: the library agrees where it answers; plain model files are answered', (t) => {
    const files = [minimalFleet()];
    for (const c of invalidCases) {
      const f = minimalFleet();
      c.edit?.(f);
      files.push(f);
    }
    let answered = 0;
    let total = 0;
    for (const f of files) for (const text of Object.values(f)) {
      total++;
      if (agrees(text)) answered++;
    }
    t.diagnostic(`${answered} of ${total} fixture files answered`);
    assert.ok(answered > total / 2, `${answered} of ${total} fixture files answered`);
    // the shape of a generated fleet's model files (bench:load, bench:scale) and of the example fleet's
    const model = ['# model 7', 'source: hf://org/m-7-GGUF/m-7-q4_k_m.gguf', `sha256: ${'f'.repeat(64)}`, 'profile: chat', 'on_demand: { idle_timeout: 15m }', 'aliases: [alias-7]', 'memory: 1GiB', ''].join('\n');
    assert.ok(agrees(model), 'a plain model file is read without the library');
    assert.ok(agrees('engine: llama-cpp@b1\nctx_size: 4096\nqueue:\n  max: 3\n  timeout: 1s\n'), 'nested block mappings');
  });
});
