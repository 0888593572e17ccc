/**
 * `llmgw plan` on a scaling model (#42): it shows the range and how the model scales, and warns where
 * the fleet after the merge has room for fewer than its max (cpu-01 16 GiB, cpu-02 12 GiB, 1 GiB
 * reserve; alpha 4 GiB and gamma 1 GiB placed before).
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { planChanges } from '../../src/plan/plan.js';
import { minimalFleet, SHA_B, tempFleet, type FleetFilesMap } from '../harness/fleet.js';

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

const withDelta = (lines: string[]): FleetFilesMap => ({ ...minimalFleet(), 'models/delta.yaml': ['source: https://models.example.invalid/delta.gguf', `sha256: ${SHA_B}`, 'profile: chat', 'memory: 6GiB', ...lines, ''].join('\n') });

describe('plan: a scaling model', () => {
  it('shows the range and how it scales, and warns where the fleet has room for fewer than the max', async () => {
    const base = await spec(minimalFleet());
    const head = await spec(withDelta(['replicas: { min: 1, max: 4 }', 'scale: { target: 70%, down_after: 10m }']));
    const delta = planChanges({ base, head, observed: null, needs: {}, retries: [], now: NOW }).models.find((m) => m.model === 'delta')!;
    assert.match(delta.effects[0]!, /^added: 1\.\.4 replicas \(scales at 70 % busy, up after 10s, down after 10m\)/);
    // delta's first on cpu-02 (11 GiB of room, 5 left); one more fits on cpu-01 (10 GiB left): 2 of 4
    assert.ok(delta.effects.includes('warning: the fleet has room for 2 of its max 4 replicas (6 GiB each): under load it serves with those, short of the rest'), delta.effects.join('\n'));
  });

  it('the cores rule: a node whose declared cpus its replicas take holds the max below what its memory allows', async () => {
    const base = await spec(minimalFleet());
    const files = withDelta(['replicas: { min: 1, max: 4 }']);
    files['nodes/cpu-01.yaml'] = files['nodes/cpu-01.yaml']!.replace('capacity: { memory: 16GiB }', 'capacity: { memory: 64GiB, cpus: 4 }');
    files['profiles/chat.yaml'] = files['profiles/chat.yaml']! + 'threads: 2\n';
    const delta = planChanges({ base, head: await spec(files), observed: null, needs: {}, retries: [], now: NOW }).models.find((m) => m.model === 'delta')!;
    // delta's first on cpu-01 (most room); its 4 cpus take one more at 2 threads, cpu-02 (cpus not declared) one by memory: 3 of 4
    assert.ok(delta.effects.includes('warning: the fleet has room for 3 of its max 4 replicas (6 GiB and 2 threads each, by the nodes\' declared cpus): under load it serves with those, short of the rest'), delta.effects.join('\n'));
  });

  it('no warning where the max fits; an on-demand max_replicas counts too', async () => {
    const base = await spec(minimalFleet());
    const fits = planChanges({ base, head: await spec(withDelta(['replicas: { min: 1, max: 2 }'])), observed: null, needs: {}, retries: [], now: NOW }).models.find((m) => m.model === 'delta')!;
    assert.ok(!fits.effects.some((e) => e.startsWith('warning: the fleet has room')), fits.effects.join('\n'));
    const od = planChanges({ base, head: await spec(withDelta(['on_demand: { max_replicas: 3 }'])), observed: null, needs: {}, retries: [], now: NOW }).models.find((m) => m.model === 'delta')!;
    assert.match(od.effects[0]!, /^added: on demand \(idle 15m, max 3; scales at 80 % busy/);
    // not active, nothing placed: 1 on cpu-01 (10 GiB left) and 1 on cpu-02 (11 GiB): 2 of 3
    assert.ok(od.effects.some((e) => e.startsWith('warning: the fleet has room for 2 of its max 3 replicas')), od.effects.join('\n'));
  });
});
