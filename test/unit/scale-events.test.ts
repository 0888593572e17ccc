/**
 * Scaling in the fleet's events (#42): each change of a model's count, with its numbers, once; extra
 * replicas that fit nowhere, when the shortfall appears or changes (with placement's code).
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { deriveEvents } from '../../src/events/derive.js';
import { pageView } from '../../src/ui/view.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import type { ScaleView } from '../../src/reconciler/view.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { modelView, nodeView, snapshot } from '../harness/views.js';

const SPEC: FleetSpec = fakeSpec({ models: { sc: {} } });
const snap = (at: number, scale: ScaleView) => snapshot({ at, appliedRevision: 'aaaaaaaaaaaaaaaa', lastSyncOk: at, models: [modelView(SPEC.models.sc!, { desired: scale.count, scale })], nodes: [nodeView('node-1')] });
const up = { at: 5, from: 1, to: 3, direction: 'up' as const, why: '1 busy and 5 waiting on 1 slot for 10 s (target 80 % busy)' };

describe('scaling events', () => {
  it('a change once, with its numbers; a shortfall when it appears or changes', () => {
    const s1 = snap(1, { min: 1, max: 3, count: 1, last: null, short: null });
    const s2 = snap(6, { min: 1, max: 3, count: 3, last: up, short: null });
    assert.deepEqual(deriveEvents(s1, s2).map((e) => [e.kind, e.message]), [['scaled', 'sc: scaled 1 → 3: 1 busy and 5 waiting on 1 slot for 10 s (target 80 % busy)']]);
    const s3 = snap(7, { min: 1, max: 3, count: 3, last: up, short: { wants: 3, fit: 2, code: 'PLACEMENT_NO_ROOM', reason: 'needs 6 GiB; largest free is 1 GiB on node-1' } });
    const e3 = deriveEvents(s2, s3);
    assert.deepEqual(e3.map((e) => [e.kind, e.code, e.message]), [['short-of-room', 'PLACEMENT_NO_ROOM', 'sc: wants 3, 2 fit: needs 6 GiB; largest free is 1 GiB on node-1']]);
    assert.deepEqual(deriveEvents(s3, snap(8, { min: 1, max: 3, count: 3, last: up, short: { wants: 3, fit: 2, code: 'PLACEMENT_NO_ROOM', reason: 'needs 6 GiB; largest free is 1.2 GiB on node-1' } })), []);
  });

  it('the status page shows the count of the range and why, in ctl status\'s words', () => {
    const s = snapshot({ at: 10_000, appliedRevision: 'aaaaaaaaaaaaaaaa', lastSyncOk: 10_000, nodes: [nodeView('node-1')], models: [modelView(SPEC.models.sc!, { phase: 'ready', desired: 3, ready: 2, scale: { min: 1, max: 3, count: 3, last: up, short: { wants: 3, fit: 2, code: 'PLACEMENT_NO_ROOM', reason: 'needs 6 GiB; largest free is 1 GiB on node-1' } } })] });
    const card = pageView(s, SPEC).groups.flatMap((g) => g.models).find((m) => m.name === 'sc')!;
    assert.equal(card.detail, 'desired 3 of 1..3: wants 3, 2 fit: needs 6 GiB; largest free is 1 GiB on node-1');
  });
});
