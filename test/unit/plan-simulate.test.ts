import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { observedFromPlanStatus } from '../../src/plan/observed.js';
import { mergeStatus, statusFromJson } from '../../src/plan/status.js';
import { planChanges } from '../../src/plan/plan.js';
import { minimalFleet, SHA_B, tempFleet, type FleetFilesMap } from '../harness/fleet.js';

const GiB = 2 ** 30;
const NOW = Date.parse('2026-11-30T12:00:00Z');

async function spec(files: FleetFilesMap): Promise<FleetSpec> {
  const f = tempFleet(files);
  try {
    const r = await loadFleetSpec(dirFiles(f.dir), null);
    assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
    return r.spec;
  } finally {
    f.cleanup();
  }
}

/** The admin API's /models and /nodes answers: alpha on cpu-01, beta (on demand) on cpu-02. */
function adminJson(base: FleetSpec) {
  const replica = (model: string, node: string) => ({ id: `${model}-1`, model, node, endpoint: '', phase: 'ready', digest: base.models[model]!.digest, outdated: false, startedAt: '2026-11-30T10:00:00Z' });
  const models = {
    at: '2026-11-30T11:58:00.000Z',
    models: [
      { name: 'alpha', memoryBytes: 4 * GiB, parked: null, replicas: [replica('alpha', 'cpu-01')] },
      { name: 'beta', memoryBytes: 6 * GiB, parked: null, replicas: [replica('beta', 'cpu-02')] },
      { name: 'gamma', memoryBytes: 1 * GiB, parked: null, replicas: [replica('gamma', 'cpu-01')] },
    ],
  };
  const nodes = {
    at: '2026-11-30T11:58:00.000Z',
    nodes: [
      { name: 'cpu-01', reachable: true, memory: { totalBytes: 16 * GiB, availableBytes: 9 * GiB }, engines: ['llama-cpp@b6500'] },
      { name: 'cpu-02', reachable: true, memory: { totalBytes: 12 * GiB, availableBytes: 5 * GiB }, engines: ['llama-cpp@b6500'] },
    ],
  };
  const status = mergeStatus([statusFromJson(models, 'models.json'), statusFromJson(nodes, 'nodes.json')]);
  return observedFromPlanStatus(status, { source: 'admin API', writtenAt: Date.parse(models.at), appliedRevision: null });
}

const withModel = (name: string, lines: string[]): FleetFilesMap => ({
  ...minimalFleet(),
  [`models/${name}.yaml`]: [`source: https://models.example.invalid/${name}.gguf`, `sha256: ${SHA_B}`, 'profile: chat', ...lines, ''].join('\n'),
});

interface Case {
  readonly name: string;
  readonly add: readonly string[];
  readonly verdict: string;
  readonly text: RegExp;
}

// cpu-01: 16 GiB − 1 GiB reserve − alpha 4 − gamma 1 = 10 GiB free; cpu-02: 12 − 1 − beta 6 = 5 GiB free.
const cases: Case[] = [
  { name: 'fits beside what runs', add: ['replicas: 1', 'memory: 9GiB'], verdict: 'fits', text: /^fits on cpu-01$/ },
  { name: 'two replicas spread over both nodes', add: ['replicas: 2', 'memory: 5GiB'], verdict: 'fits', text: /^fits on cpu-01, cpu-02$/ },
  { name: 'an on-demand model that fits only once the idle on-demand beta is evicted', add: ['on_demand: {}', 'memory: 11GiB'], verdict: 'fits-after-eviction', text: /^fits on cpu-02 when activated, after evicting the idle on-demand replica of beta on cpu-02$/ },
  { name: 'an always-on model does not evict: fits nowhere, with the largest free node', add: ['replicas: 1', 'memory: 11GiB'], verdict: 'fits-nowhere', text: /^fits nowhere: needs 11 GiB; largest free 10 GiB on cpu-01; 2 nodes checked$/ },
  { name: 'two of which one fits', add: ['replicas: 2', 'memory: 8GiB'], verdict: 'partly', text: /^1 of 2 fit, on cpu-01; the other 1 fits nowhere beside them$/ },
  { name: 'no replicas wanted', add: ['replicas: 0', 'memory: 1GiB'], verdict: 'none-wanted', text: /^no replicas wanted now$/ },
];

describe('plan placement: the planner on the observed usage', () => {
  for (const c of cases) {
    it(c.name, async () => {
      const base = await spec(minimalFleet());
      const head = await spec(withModel('delta', [...c.add]));
      const observed = adminJson(base);
      const report = planChanges({ base, head, observed, needs: {}, retries: [], now: NOW });
      assert.equal(report.usage, 'observed');
      const delta = report.models.find((m) => m.model === 'delta')!;
      assert.equal(delta.placement?.verdict, c.verdict, delta.placement?.text);
      assert.match(delta.placement!.text, c.text);
      assert.equal(report.status?.ageMs, 2 * 60_000, 'the age of the status it used');
    });
  }

  it('no status: the base placed as the planner would', async () => {
    const base = await spec(minimalFleet());
    const head = await spec(withModel('delta', ['replicas: 1', 'memory: 9GiB']));
    const report = planChanges({ base, head, observed: null, needs: {}, retries: [], now: NOW });
    assert.equal(report.usage, 'assumed');
    assert.equal(report.status, null);
    // from scratch, alpha (4 GiB), beta idle (on demand, not placed) and gamma (1 GiB) go where most is free
    assert.deepEqual(report.nodes.map((n) => [n.name, n.usedBefore / GiB]), [['cpu-01', 5], ['cpu-02', 0]]);
    assert.equal(report.models.find((m) => m.model === 'delta')!.placement?.text, 'fits on cpu-02');
  });

  it('a need that is not known is said once, with the model’s file, and is not "fits nowhere"', async () => {
    const base = await spec(minimalFleet());
    const head = await spec(withModel('delta', ['replicas: 1']));
    const error = 'memory need unknown: could not read the GGUF header of https://models.example.invalid/delta.gguf (timed out after 1s); set memory: in models/delta.yaml';
    const report = planChanges({ base, head, observed: adminJson(base), needs: { delta: { error } }, retries: [], now: NOW });
    const delta = report.models.find((m) => m.model === 'delta')!;
    assert.equal(delta.placement?.verdict, 'need-unknown');
    assert.equal(delta.placement?.text, error);
    assert.equal(delta.placement?.fits, true);
  });
});
