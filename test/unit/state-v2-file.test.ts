/**
 * A version-2 state file written by llmgw before the entity-shaped record (test/fixtures/
 * state-v2-main.json: `llmgw serve --local` of that main on the bundled local fleet, stopped with its
 * demo replica running) read by this llmgw: every fact kept, as one entry per model and per replica.
 * By hand, the same file under a new `serve --local` adopted the running replica (same pid, no start)
 * and rewrote the file as version 3; the shell tests drive adoption with fake nodes.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
import { STATE_VERSION } from '../../src/reconciler/state.js';
import { repoRoot } from '../harness/paths.js';
import { asV2 } from '../harness/record-v2.js';

const text = readFileSync(join(repoRoot, 'test', 'fixtures', 'state-v2-main.json'), 'utf8');
const v2 = JSON.parse(text) as { version: number; appliedRevision: string; models: Record<string, { parked: unknown; consecutiveFailures: number; digest: string }>; readySince: Record<string, number>; accounted: Record<string, number>; handledRetries: string[] };

describe('a version-2 state file written by the llmgw before', () => {
  const s = stateFromJson(v2);
  it('is a version-2 file (the fixture is what it says)', () => assert.equal(v2.version, 2));
  it('reads as this version with the revision and retries as they were', () => {
    assert.equal(s.version, STATE_VERSION);
    assert.equal(s.appliedRevision, v2.appliedRevision);
    assert.deepEqual(s.handledRetries, v2.handledRetries);
  });
  it('keeps every model\'s health: kev-demo parked after 5 failures, the others healthy', () => {
    assert.deepEqual(Object.keys(s.models).sort(), Object.keys(v2.models).sort());
    for (const [name, h] of Object.entries(v2.models)) assert.deepEqual(s.models[name]!.health, h, name);
    assert.equal(s.models['kev-demo']!.health.consecutiveFailures, 5);
    assert.notEqual(s.models['kev-demo']!.health.parked, null);
  });
  it('keeps the running replica ready since when it was (its model and node come from the first look), and every counted failure', () => {
    for (const [id, since] of Object.entries(v2.readySince)) assert.deepEqual(s.replicas[id]!.phase, { kind: 'ready', since, seen: true }, id);
    assert.deepEqual(asV2(s).readySince, v2.readySince);
    assert.deepEqual(asV2(s).accounted, v2.accounted);
  });
  it('round-trips as version 3', () => assert.deepEqual(stateFromJson(JSON.parse(JSON.stringify(s))), s));
});
