/**
 * Fault 11 (fuzzing), the fleet loader: random YAML trees, names, sizes, durations, unicode and deep
 * nesting, mutated into a valid fleet or written whole. Must hold: the loader never throws; a fleet
 * is either valid or rejected with problems; every problem has a catalogue code, a file and (for
 * problems inside a file) a line.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { stringify } from 'yaml';
import { parse } from 'yaml';
import { Reasons } from '../../src/errors/catalogue.js';
import type { FleetEntry, FleetFiles } from '../../src/fleet-spec/files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import type { LoadResult, Problem } from '../../src/fleet-spec/types.js';
import { minimalFleet } from '../harness/fleet.js';
import { recordFault } from '../harness/fault-report.js';

const RUNS = Number(process.env.LLMGW_FUZZ_RUNS ?? 150);

/** Fleet files in memory. */
function memFiles(files: Record<string, string | Uint8Array>): FleetFiles {
  const enc = new TextEncoder();
  const bytes = new Map(Object.entries(files).map(([p, c]) => [p, typeof c === 'string' ? enc.encode(c) : c]));
  const dirs = new Set([...bytes.keys()].filter((p) => p.includes('/')).map((p) => p.slice(0, p.indexOf('/'))));
  return {
    label: 'fuzz',
    async list(): Promise<FleetEntry[]> {
      return [...[...dirs].map((d) => ({ path: d, kind: 'dir' as const, size: 0 })), ...[...bytes].map(([path, b]) => ({ path, kind: 'file' as const, size: b.length }))];
    },
    async read(path: string, maxBytes: number): Promise<Uint8Array> {
      const b = bytes.get(path);
      if (!b) throw Object.assign(new Error(`no ${path}`), { code: 'ENOENT' });
      return b.subarray(0, maxBytes);
    },
  };
}

/** Problems that are about a file or the repo as a whole, not a place inside a file. */
const FILE_LEVEL = new Set(['SPEC_MISSING_FLEET', 'SPEC_UNEXPECTED_FILE', 'SPEC_BAD_NAME', 'SPEC_FILE_TOO_LARGE', 'SPEC_NOT_UTF8', 'SPEC_SYMLINK_ESCAPES', 'SPEC_NOT_A_MAPPING']);

const seen = new Set<string>();

function checkResult(r: LoadResult, files: Record<string, unknown>): void {
  if (r.ok) return;
  for (const p of r.problems) seen.add(p.line === null ? `${p.code}(no line)` : p.code);
  assert.ok(r.problems.length > 0, 'rejected without problems');
  for (const p of r.problems as Problem[]) {
    assert.ok(p.code in Reasons, `untyped problem ${p.code}: ${p.message}`);
    assert.ok(typeof p.message === 'string' && p.message.length > 0);
    assert.ok(typeof p.file === 'string' && p.file.length > 0, `no file: ${JSON.stringify(p)}`);
    if (p.code !== 'SPEC_MISSING_FLEET' && p.code !== 'SPEC_DANGLING_REF' && p.code !== 'SPEC_DUPLICATE_NAME') assert.ok(p.file in files || p.file === 'fleet.yaml', `problem names a file that is not there: ${p.file}`);
    if (!FILE_LEVEL.has(p.code)) assert.ok(typeof p.line === 'number' && p.line >= 1, `no line: ${JSON.stringify(p)}`);
  }
}

async function loads(files: Record<string, string>): Promise<LoadResult> {
  try {
    return await loadFleetSpec(memFiles(files), null);
  } catch (e) {
    throw new Error(`the loader threw (${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}) on ${JSON.stringify(files).slice(0, 2000)}`);
  }
}

// values that look like what fleet files hold, and what they should not
const name = fc.oneof(fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,70}$/), fc.string({ unit: 'grapheme', maxLength: 20 }), fc.constantFrom('..', '.', '-x', 'a/b', 'ÄÖ', '\u202e', 'a\u0000b', ' ', ''));
const size = fc.oneof(fc.stringMatching(/^[0-9]{1,20}(\.[0-9]{1,3})?(B|KiB|MiB|GiB|TiB|KB|MB|GB|k|)$/), fc.integer(), fc.double(), fc.constantFrom('-1GiB', '1e309', 'NaN', '∞GiB'));
const duration = fc.oneof(fc.stringMatching(/^([0-9]{1,12}(\.[0-9])?(ms|s|m|h|d)){1,3}$/), fc.integer({ min: -5, max: 2 ** 53 }), fc.constantFrom('1x', '10', '-5s', '1e3s', ''));
const scalar = fc.oneof(name, size, duration, fc.boolean(), fc.constant(null), fc.string({ unit: 'binary', maxLength: 40 }));
const tree = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, scalar, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.dictionary(fc.oneof(name, fc.constantFrom('source', 'sha256', 'profile', 'replicas', 'engine', 'ctx_size', 'host', 'memory', 'labels', 'keys', 'versions', 'on_demand', 'poll_interval', 'backoff')), tie('value'), { maxKeys: 5 }),
})).value;

/** A deeply nested value (lists or maps), to probe recursion limits. */
const deep = fc.integer({ min: 50, max: 3000 }).map((n) => `${'['.repeat(n)}1${']'.repeat(n)}`);

const fileNames = fc.constantFrom('fleet.yaml', 'models/alpha.yaml', 'models/beta.yaml', 'profiles/chat.yaml', 'nodes/cpu-01.yaml', 'engines/llama-cpp.yaml', 'access/keys.yaml');

describe('fault 11: fuzzing the fleet loader', () => {
  it(`a valid fleet with one field replaced by a random tree (${RUNS} runs): no crash, typed problems with file and line`, async () => {
    const base = minimalFleet();
    await fc.assert(
      fc.asyncProperty(fileNames, fc.string({ maxLength: 20 }), tree, async (file, key, value) => {
        const doc = (parse(base[file] ?? '{}') ?? {}) as Record<string, unknown>;
        const keys = Object.keys(doc);
        const k = keys.length && key.length % 2 === 0 ? keys[key.length % keys.length]! : key;
        doc[k] = value;
        const files = { ...base, [file]: stringify(doc) };
        checkResult(await loads(files), files);
      }),
      { numRuns: RUNS },
    );
  });

  it(`whole random files, names and deep nesting (${RUNS} runs)`, async () => {
    const base = minimalFleet();
    const text = fc.oneof(
      tree.map((t) => stringify(t)),
      fc.string({ unit: 'grapheme', maxLength: 200 }),
      fc.stringMatching(/^([a-z_]{1,8}: ?([&*!|>-]?[a-z0-9 {}[\],:'"#]{0,12})\n( {1,4}- ?[a-z0-9&*]{0,6}\n)?){1,8}$/),
      deep,
      deep.map((d) => `versions: ${d}\n`),
    );
    await fc.assert(
      fc.asyncProperty(fc.oneof(fileNames, name.map((n) => `models/${n}.yaml`), name.map((n) => `${n}/x.yaml`), name), text, async (file, content) => {
        const files = { ...base, [file]: content };
        checkResult(await loads(files), files);
      }),
      { numRuns: RUNS },
    );
    recordFault({ fault: '11 fuzzing: fleet loader', injected: `${2 * RUNS} random fleets (random YAML trees in fields, random files, names, sizes, durations, unicode, nesting to 3000)`, held: `no crash or untyped error; every problem has a catalogue code and a file, and a line when it is inside a file (codes seen: ${[...seen].sort().join(', ')})` });
  });
});
