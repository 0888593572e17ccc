/** A replica's warm-up in the fleet's events (#38): once, with what it replayed and cost; an early end with its reason code. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { deriveEvents } from '../../src/events/derive.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import type { ReplicaView, WarmupView } from '../../src/reconciler/view.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { modelView, nodeView, replicaView, snapshot } from '../harness/views.js';

const SPEC: FleetSpec = fakeSpec({ models: { m: {} } });
const snap = (at: number, replicas: ReplicaView[]) => snapshot({ at, appliedRevision: 'aaaaaaaaaaaaaaaa', lastSyncOk: at, models: [modelView(SPEC.models.m!, { replicas })], nodes: [nodeView('node-1')] });
const r = (phase: ReplicaView['phase'], warmup?: WarmupView) => replicaView('r1', 'm', { node: 'node-1', endpoint: 'http://127.0.0.1:31000', phase, ...(warmup ? { warmup } : {}) });

describe('warm-up events', () => {
  it('a replica ready after its warm-up: the ready event, then one warm-up event with its cost; not again', () => {
    const done: WarmupView = { prefixes: 12, tokens: 340, seconds: 1.234, code: null, message: null };
    const s1 = snap(1, [r('starting')]);
    const s2 = snap(2, [r('ready', done)]);
    assert.deepEqual(deriveEvents(s1, s2).map((e) => [e.kind, e.code, e.message]), [
      ['replica-ready', null, 'm: replica r1 on node-1 is ready at http://127.0.0.1:31000'],
      ['replica-warmed', null, 'm: replica r1 warmed up before taking traffic (12 prefixes, 340 prompt tokens, 1.23 s)'],
    ]);
    assert.deepEqual(deriveEvents(s2, snap(3, [r('ready', done)])), []);
  });

  it('a warm-up cut at its timeout: its reason code and hint', () => {
    const cut: WarmupView = { prefixes: 1, tokens: 40, seconds: 0.05, code: 'WARMUP_TIMED_OUT', message: 'the warm-up was cut at its timeout of 50 ms after 1 of 12 prefixes' };
    const e = deriveEvents(snap(1, [r('starting')]), snap(2, [r('ready', cut)])).find((x) => x.kind === 'replica-warmed')!;
    assert.equal(e.code, 'WARMUP_TIMED_OUT');
    assert.equal(e.message, 'm: replica r1 took traffic before its warm-up finished (1 prefixes, 40 prompt tokens, 0.05 s): the warm-up was cut at its timeout of 50 ms after 1 of 12 prefixes');
    assert.match(e.hint ?? '', /warmup\.timeout/);
  });
  it('a replica warmed from the old replica\'s slot files: said so, with the tokens restored (#38 item 3)', () => {
    const restored: WarmupView = { prefixes: 12, tokens: 36, seconds: 0.5, code: null, message: null, via: 'restore', restored: 2406 };
    const e = deriveEvents(snap(1, [r('starting')]), snap(2, [r('ready', restored)])).find((x) => x.kind === 'replica-warmed')!;
    assert.equal(e.code, null);
    assert.equal(e.message, 'm: replica r1 warmed up before taking traffic (12 prefixes, 36 prompt tokens, 0.50 s), from the old replica\'s slot files (2406 tokens restored)');
  });

  it('a restore that did not help: warmed by replay, with SLOT_RESTORE_NO_GAIN and its hint', () => {
    const noGain: WarmupView = { prefixes: 1, tokens: 500, seconds: 0.3, code: 'SLOT_RESTORE_NO_GAIN', message: 'the new replica restored 700 tokens from slot files, but its first replay took 0 of 500 prompt tokens from the cache: warmed by replay', via: 'replay' };
    const e = deriveEvents(snap(1, [r('starting')]), snap(2, [r('ready', noGain)])).find((x) => x.kind === 'replica-warmed')!;
    assert.equal(e.code, 'SLOT_RESTORE_NO_GAIN');
    assert.equal(e.message, `m: replica r1 warmed up by replay before taking traffic (1 prefixes, 500 prompt tokens, 0.30 s): ${noGain.message}`);
    assert.match(e.hint ?? '', /cache_n/);
  });
});
