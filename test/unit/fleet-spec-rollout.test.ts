/**
 * `rollout:` blocks and checks/ files (#34) through the loader: what a block becomes (fractions,
 * ms, defaults), fleet.yaml's default and a model's own replacing it whole, and each semantic
 * problem with its file, line, field and code — all of them at once.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import type { LoadResult, Problem } from '../../src/fleet-spec/types.js';
import { minimalFleet, tempFleet, type FleetFilesMap } from '../harness/fleet.js';

async function load(edit: (f: FleetFilesMap) => void): Promise<LoadResult> {
  const files = minimalFleet();
  edit(files);
  const f = tempFleet(files);
  try {
    return await loadFleetSpec(dirFiles(f.dir), null);
  } finally {
    f.cleanup();
  }
}

async function loadOk(edit: (f: FleetFilesMap) => void): Promise<Extract<LoadResult, { ok: true }>> {
  const r = await load(edit);
  assert.ok(r.ok, JSON.stringify(!r.ok && r.problems, null, 2));
  return r;
}

const lines = (...ls: string[]): string => ls.join('\n') + '\n';
const show = (ps: readonly Problem[]): string => ps.map((p) => `${p.file}:${p.line} ${p.path} ${p.code} ${p.message}`).join('\n');

const ARITHMETIC = lines('request:', '  messages: [{ role: user, content: "What is 2+2?" }]', '  max_tokens: 8', 'expect: { matches: "\\\\b4\\\\b" }');

describe('rollout blocks', () => {
  it('no block anywhere: every model rolls out as today (null), and fleet.yaml has no default', async () => {
    const r = await loadOk(() => {});
    for (const m of Object.values(r.spec.models)) assert.equal(m.rollout, null, m.name);
    assert.equal(r.spec.settings.rollout, null);
    assert.deepEqual(r.warnings, []);
  });

  it("a model's block: checks inline and shared, the canary in fractions and ms, every omitted field its default", async () => {
    const r = await loadOk((f) => {
      f['checks/arithmetic.yaml'] = ARITHMETIC;
      f['models/alpha.yaml'] += lines(
        'rollout:',
        '  checks:',
        '    - name: answers-arithmetic',
        '      request: { messages: [{ role: user, content: "2+2?" }], max_tokens: 8 }',
        '      expect: { status: 200, matches: "4", not_matches: "five", contains: "4", json_schema: { type: string }, max_ttft: 2s }',
        '      timeout: 10s',
        '    - use: arithmetic',
        '    - name: embeds',
        '      path: /v1/embeddings',
        '      request: { input: hello }',
        '  canary:',
        '    steps: [10%, 50%, 100%]',
        '    interval: 2m',
        '    min_requests: 12',
        '    max_error_rate_increase: 0.5%',
        '    max_ttft_ratio: 2',
        '    max_tpot_ratio: 1.25',
        '    on_inconclusive: rollback',
      );
      f['models/gamma.yaml'] += 'rollout: { canary: {} }\n';
    });
    const alpha = r.spec.models.alpha!.rollout!;
    assert.deepEqual(alpha.checks, [
      {
        name: 'answers-arithmetic',
        file: 'models/alpha.yaml',
        path: '/v1/chat/completions',
        request: { messages: [{ role: 'user', content: '2+2?' }], max_tokens: 8 },
        expect: { status: 200, matches: '4', contains: '4', notMatches: 'five', jsonSchema: { type: 'string' }, maxTtftMs: 2000 },
        timeoutMs: 10_000,
      },
      {
        name: 'arithmetic',
        file: 'checks/arithmetic.yaml',
        path: '/v1/chat/completions',
        request: { messages: [{ role: 'user', content: 'What is 2+2?' }], max_tokens: 8 },
        expect: { status: 200, matches: '\\b4\\b', contains: null, notMatches: null, jsonSchema: null, maxTtftMs: null },
        timeoutMs: 30_000,
      },
      {
        name: 'embeds',
        file: 'models/alpha.yaml',
        path: '/v1/embeddings',
        request: { input: 'hello' },
        expect: { status: 200, matches: null, contains: null, notMatches: null, jsonSchema: null, maxTtftMs: null },
        timeoutMs: 30_000,
      },
    ]);
    assert.deepEqual(alpha.canary, { steps: [0.1, 0.5, 1], intervalMs: 120_000, minRequests: 12, maxErrorRateIncrease: 0.005, maxTtftRatio: 2, maxTpotRatio: 1.25, onInconclusive: 'rollback' });
    // `canary: {}` takes every default; no checks
    assert.deepEqual(r.spec.models.gamma!.rollout, {
      checks: [],
      canary: { steps: [0.1, 0.5], intervalMs: 300_000, minRequests: 30, maxErrorRateIncrease: 0.02, maxTtftRatio: 1.5, maxTpotRatio: 1.5, onInconclusive: 'hold' },
    });
    assert.equal(r.spec.models.beta!.rollout, null);
    assert.ok(Object.isFrozen(alpha.checks[0]!.request), 'the spec is frozen, the check requests too');
    // the canary is loaded and acted on: no warning
    assert.deepEqual(r.warnings, []);
  });

  it("fleet.yaml's block is every model's default; a model's own block replaces it whole; `rollout: {}` turns it off", async () => {
    const r = await loadOk((f) => {
      f['checks/arithmetic.yaml'] = ARITHMETIC;
      f['fleet.yaml'] += lines('rollout:', '  checks: [{ use: arithmetic }]', '  canary: { steps: [25%], interval: 1m }');
      f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - name: own', '      request: { prompt: "2+2=" }', '      path: /v1/completions');
      f['models/gamma.yaml'] += 'rollout: {}\n';
    });
    const dflt = r.spec.settings.rollout!;
    assert.deepEqual(dflt.checks.map((c) => [c.name, c.file]), [['arithmetic', 'checks/arithmetic.yaml']]);
    assert.deepEqual(dflt.canary?.steps, [0.25]);
    assert.equal(dflt.canary?.intervalMs, 60_000);
    assert.deepEqual(r.spec.models.beta!.rollout, dflt, 'beta has no block: it takes the default');
    // alpha's block has checks only: the default's canary does not carry over
    assert.deepEqual(r.spec.models.alpha!.rollout!.checks.map((c) => [c.name, c.path]), [['own', '/v1/completions']]);
    assert.equal(r.spec.models.alpha!.rollout!.canary, null);
    assert.equal(r.spec.models.gamma!.rollout, null);
  });

  it('a checks/ file no rollout uses is a warning at its file, not an error', async () => {
    const r = await loadOk((f) => (f['checks/arithmetic.yaml'] = ARITHMETIC));
    assert.deepEqual(
      r.warnings.map((w) => [w.file, w.line, w.code]),
      [['checks/arithmetic.yaml', 1, 'SPEC_UNUSED_CHECK']],
    );
    assert.match(r.warnings[0]!.hint, /use: arithmetic/);
  });

  /** One bad edit each: [name, edit, file, line, field, code, message]. */
  const cases: [string, (f: FleetFilesMap) => void, string, number, string, string, RegExp][] = [
    ['a step of 0%', (f) => (f['models/alpha.yaml'] += 'rollout: { canary: { steps: [0%, 50%] } }\n'), 'models/alpha.yaml', 8, '/rollout/canary/steps/0', 'SPEC_INVALID_VALUE', /step 0% is not above 0% and at most 100%/],
    ['a step above 100%', (f) => (f['models/alpha.yaml'] += 'rollout: { canary: { steps: [50%, 150%] } }\n'), 'models/alpha.yaml', 8, '/rollout/canary/steps/1', 'SPEC_INVALID_VALUE', /150%/],
    ['steps not increasing', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  canary:', '    steps: [10%, 50%, 50%]')), 'models/alpha.yaml', 10, '/rollout/canary/steps/2', 'SPEC_INVALID_VALUE', /not above the step before it \(50%\)/],
    ['a step written as a number', (f) => (f['models/gamma.yaml'] += 'rollout: { canary: { steps: [10] } }\n'), 'models/gamma.yaml', 6, '/rollout/canary/steps/0', 'SPEC_SCHEMA', /must be of type string/],
    ['min_requests 0', (f) => (f['fleet.yaml'] += lines('rollout:', '  canary:', '    min_requests: 0')), 'fleet.yaml', 5, '/rollout/canary/min_requests', 'SPEC_INVALID_VALUE', /min_requests is 0/],
    ['a TTFT ratio below 1', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  canary:', '    max_ttft_ratio: 0.8')), 'models/alpha.yaml', 10, '/rollout/canary/max_ttft_ratio', 'SPEC_INVALID_VALUE', /below 1/],
    ['a TPOT ratio below 1', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  canary:', '    max_tpot_ratio: 0.5')), 'models/alpha.yaml', 10, '/rollout/canary/max_tpot_ratio', 'SPEC_INVALID_VALUE', /below 1/],
    ['an error-rate increase above 100%', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  canary:', '    max_error_rate_increase: 101%')), 'models/alpha.yaml', 10, '/rollout/canary/max_error_rate_increase', 'SPEC_INVALID_VALUE', /above 100%/],
    ['an interval of 0', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  canary:', '    interval: 0s')), 'models/alpha.yaml', 10, '/rollout/canary/interval', 'SPEC_INVALID_VALUE', /interval is 0/],
    ['an unknown on_inconclusive', (f) => (f['models/gamma.yaml'] += 'rollout: { canary: { on_inconclusive: promote } }\n'), 'models/gamma.yaml', 6, '/rollout/canary/on_inconclusive', 'SPEC_SCHEMA', /"promote" is not allowed/],
    ['a regex that does not compile', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - name: four', '      request: { prompt: x }', '      expect: { matches: "(4" }')), 'models/alpha.yaml', 12, '/rollout/checks/0/expect/matches', 'SPEC_INVALID_VALUE', /not a valid regular expression/],
    ['a not_matches regex that does not compile (in checks/)', (f) => {
      f['checks/bad.yaml'] = lines('request: { prompt: x }', 'expect:', '  not_matches: "[a-"');
      f['models/alpha.yaml'] += 'rollout: { checks: [{ use: bad }] }\n';
    }, 'checks/bad.yaml', 3, '/expect/not_matches', 'SPEC_INVALID_VALUE', /not_matches of check "bad" is not a valid regular expression/],
    ['a json_schema ajv does not compile', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - name: json', '      request: { prompt: x }', '      expect:', '        json_schema: { type: objekt }')), 'models/alpha.yaml', 13, '/rollout/checks/0/expect/json_schema', 'SPEC_INVALID_VALUE', /does not compile/],
    ['use: naming no checks/ file', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - use: arithmetik')), 'models/alpha.yaml', 10, '/rollout/checks/0/use', 'SPEC_DANGLING_REF', /check "arithmetik" does not exist/],
    ['use: with other fields', (f) => {
      f['checks/arithmetic.yaml'] = ARITHMETIC;
      f['models/gamma.yaml'] += lines('rollout:', '  checks:', '    - use: arithmetic', '      timeout: 5s');
    }, 'models/gamma.yaml', 8, '/rollout/checks/0', 'SPEC_SCHEMA', /more than 1 properties/],
    ['an inline check without a request', (f) => (f['models/gamma.yaml'] += lines('rollout:', '  checks:', '    - name: four')), 'models/gamma.yaml', 8, '/rollout/checks/0/request', 'SPEC_SCHEMA', /missing required field "request"/],
    ['the same check name twice', (f) => {
      f['checks/four.yaml'] = ARITHMETIC;
      f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - use: four', '    - name: four', '      request: { prompt: x }');
    }, 'models/alpha.yaml', 11, '/rollout/checks/1/name', 'SPEC_DUPLICATE_NAME', /check "four" appears twice in this rollout \(first on line 10\)/],
    ['a request that sets model', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - name: four', '      request: { model: alpha, prompt: x }')), 'models/alpha.yaml', 11, '/rollout/checks/0/request/model', 'SPEC_INVALID_VALUE', /sets the request's model/],
    ['max_ttft above the timeout', (f) => (f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - name: four', '      request: { prompt: x }', '      expect: { max_ttft: 1m }', '      timeout: 20s')), 'models/alpha.yaml', 12, '/rollout/checks/0/expect/max_ttft', 'SPEC_INVALID_VALUE', /max_ttft \(1m\) of check "four" is longer than its timeout \(20s\)/],
    ['a checks/ file that is not YAML', (f) => (f['checks/notes.txt'] = 'x\n'), 'checks/notes.txt', 1, '', 'SPEC_UNEXPECTED_FILE', /checks\/ holds one <name>.yaml file per object/],
    ['a checks/ file with a field of a model', (f) => {
      f['checks/four.yaml'] = ARITHMETIC + 'name: four\n';
      f['models/alpha.yaml'] += 'rollout: { checks: [{ use: four }] }\n';
    }, 'checks/four.yaml', 5, '/name', 'SPEC_SCHEMA', /unknown field "name"/],
  ];
  for (const [name, edit, file, line, field, code, message] of cases) {
    it(`rejects ${name}: ${file}:${line} ${field} ${code}`, async () => {
      const r = await load(edit);
      assert.ok(!r.ok, 'expected the fleet to be rejected');
      assert.equal(r.problems.length, 1, show(r.problems));
      const p = r.problems[0]!;
      assert.deepEqual([p.file, p.line, p.path, p.code], [file, line, field, code], show(r.problems));
      assert.match(p.message, message);
      assert.ok(p.hint.length > 10, 'every problem carries a hint');
      assert.ok(p.col !== null && p.col >= 1);
    });
  }

  it('reports every rollout problem at once, across fleet.yaml, model files and checks/', async () => {
    const r = await load((f) => {
      f['fleet.yaml'] += lines('rollout:', '  canary: { steps: [50%, 20%], min_requests: 0 }');
      f['checks/bad.yaml'] = lines('request: { prompt: x }', 'expect: { matches: "(" }');
      f['models/alpha.yaml'] += lines('rollout:', '  checks:', '    - use: bad', '    - use: missing', '  canary: { max_tpot_ratio: 0.9 }');
    });
    assert.ok(!r.ok);
    assert.deepEqual(
      r.problems.map((p) => [p.file, p.line, p.path, p.code]),
      [
        ['checks/bad.yaml', 2, '/expect/matches', 'SPEC_INVALID_VALUE'],
        ['fleet.yaml', 4, '/rollout/canary/steps/1', 'SPEC_INVALID_VALUE'],
        ['fleet.yaml', 4, '/rollout/canary/min_requests', 'SPEC_INVALID_VALUE'],
        ['models/alpha.yaml', 11, '/rollout/checks/1/use', 'SPEC_DANGLING_REF'],
        ['models/alpha.yaml', 12, '/rollout/canary/max_tpot_ratio', 'SPEC_INVALID_VALUE'],
      ],
      show(r.problems),
    );
  });
});
