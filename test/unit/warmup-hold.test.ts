/** A replica being warmed up is shown starting by every look (pure: node-fleet.ts heldBack), and which of them were seen ready. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { NodeObservation, ReplicaObservation } from '../../src/nodes/driver.js';
import { heldBack } from '../../src/reconciler/node-fleet.js';

const rep = (id: string, state: ReplicaObservation['state']): ReplicaObservation => ({ id, model: 'm', digest: 'd', port: 1, pid: 1, startedAt: 0, endpoint: 'http://127.0.0.1:1', state });
const obs = (...replicas: ReplicaObservation[]): NodeObservation => ({ node: 'n', at: 0, memory: { totalBytes: 1, availableBytes: 1 }, cpus: 1, cpuFlags: [], arch: 'x86_64', diskFreeBytes: 1, engines: [], models: [], replicas } as unknown as NodeObservation);
const states = (o: NodeObservation): [string, string][] => o.replicas.map((r) => [r.id, r.state]);

describe('heldBack', () => {
  it('a ready replica being warmed shows starting; the others as they are', () => {
    const held = new Set<string>();
    const o = heldBack(obs(rep('new', 'ready'), rep('old', 'ready'), rep('dead', 'failed')), new Set(['new', 'dead']), held);
    assert.deepEqual(states(o), [['new', 'starting'], ['old', 'ready'], ['dead', 'failed']]);
    assert.deepEqual([...held], ['new']);
  });
  it('nothing warming: the observation itself', () => {
    const o = obs(rep('a', 'ready'));
    assert.equal(heldBack(o, new Set(), new Set()), o);
  });
  it('one that a later look sees not ready (it died while warming) is no longer held ready', () => {
    const held = new Set(['new']);
    const o = heldBack(obs(rep('new', 'failed')), new Set(['new']), held);
    assert.deepEqual(states(o), [['new', 'failed']]);
    assert.equal(held.size, 0);
  });
});
