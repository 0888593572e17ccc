/** How an HA standby acts (StandbyActs) over a fake channel: what it forwards, with which timeout, and what it keeps of the leader's answers. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { Requests } from '../../src/ha/channel.js';
import { StandbyActs } from '../../src/ha/standby.js';
import type { FleetSnapshot, ModelView, ReplicaView } from '../../src/reconciler/view.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { FakeClock, FakeTimers } from '../harness/fake-node.js';
import { nodeSpec } from '../harness/views.js';

const onDemand = { mode: 'on_demand', idleTimeoutMs: 600_000, maxReplicas: 1 } as const;
const base = fakeSpec({ models: { lazy: { scaling: onDemand }, always: {} } });
const spec = { ...base, nodes: { n1: nodeSpec('n1', { ports: { from: 9000, to: 9100 } }) } };
const rep = (id: string, endpoint: string, phase: ReplicaView['phase'] = 'ready'): ReplicaView => ({ id, model: 'lazy', node: 'n1', endpoint, phase, digest: 'd', startedAt: 0 });

interface Sent {
  kind: string;
  body: unknown;
  timeoutMs: number;
}

function standby(answer: (s: Sent) => unknown, replicas: ReplicaView[] = []): { acts: StandbyActs; sent: Sent[]; clock: FakeClock; timers: FakeTimers } {
  const clock = new FakeClock();
  const timers = new FakeTimers(clock);
  const sent: Sent[] = [];
  const requests = {
    send: async (kind: string, body: unknown, timeoutMs: number) => {
      const s = { kind, body, timeoutMs };
      sent.push(s);
      return answer(s);
    },
  } as unknown as Requests;
  const snapshot = { models: [{ name: 'lazy', replicas } as unknown as ModelView] } as unknown as FleetSnapshot;
  const acts = new StandbyActs({ requests, spec: () => spec, snapshot: () => snapshot, forwardTimeoutMs: 60_000, timers, log: pino({ level: 'silent' }) });
  return { acts, sent, clock, timers };
}

describe('StandbyActs: a standby forwards what acts on the fleet to the leader', () => {
  it('demand: within the time the router gives it (never past the forward timeout); only the replicas whose endpoints the spec allows', async () => {
    const good = rep('lazy-1', 'http://10.0.0.1:9001');
    const forged = rep('lazy-2', 'http://10.6.6.6:9001');
    const { acts, sent } = standby(() => ({ kind: 'ready', replicas: [good, forged] }));
    assert.deepEqual(await acts.demand('lazy', { timeoutMs: 5_500 }), { kind: 'ready', replicas: [good] });
    await acts.demand('lazy', { timeoutMs: 600_000 });
    await acts.demand('lazy');
    assert.deepEqual(sent, [
      { kind: 'demand', body: { model: 'lazy' }, timeoutMs: 5_500 },
      { kind: 'demand', body: { model: 'lazy' }, timeoutMs: 60_000 },
      { kind: 'demand', body: { model: 'lazy' }, timeoutMs: 60_000 },
    ]);
  });

  it('retry, rollout overrides, restart, logs and pass are forwarded as their kinds of the typed union, with the forward timeout', async () => {
    const overridden = { model: 'lazy', outcome: 'aborted', rollout: { phase: 'rolled_back', stableDigest: 's', canaryDigest: 'c', step: 0, share: 0, since: 1, until: null, verdict: null } };
    const { acts, sent } = standby((s) => (s.kind === 'restart' ? ['lazy-1'] : s.kind === 'logs' ? 'tail' : s.kind === 'retry' ? { model: 'lazy', outcome: 'unparked' } : s.kind === 'rollout' ? overridden : null));
    assert.deepEqual(await acts.retry('lazy'), { model: 'lazy', outcome: 'unparked' });
    assert.deepEqual(await acts.overrideRollout('lazy', 'abort', 'llmgw ctl (ops@box)'), overridden);
    assert.deepEqual(await acts.restart({ all: true }), ['lazy-1']);
    assert.equal(await acts.logs('lazy-1', 50), 'tail');
    await acts.requestPass('webhook');
    assert.deepEqual(
      sent.map((s) => [s.kind, s.body, s.timeoutMs]),
      [
        ['retry', { model: 'lazy' }, 60_000],
        ['rollout', { model: 'lazy', how: 'abort', by: 'llmgw ctl (ops@box)' }, 60_000],
        ['restart', { all: true }, 60_000],
        ['logs', { replica: 'lazy-1', lines: 50 }, 60_000],
        ['pass', { trigger: 'webhook' }, 60_000],
      ],
    );
  });

  it('activity of on-demand models only, several touches and holds in one request', async () => {
    const { acts, sent, clock, timers } = standby(() => null);
    const pass = (ms: number): void => {
      clock.advance(ms);
      timers.fire();
    };
    acts.touch('always');
    acts.touch('lazy');
    const release = acts.hold('lazy');
    release();
    pass(999);
    assert.equal(sent.length, 0, 'forwarded before the flush');
    pass(1);
    assert.deepEqual(sent.map((s) => [s.kind, s.body]), [['touch', { models: ['lazy'] }]]);
    acts.touch('lazy');
    acts.stop();
    pass(5_000);
    assert.equal(sent.length, 1, 'activity was forwarded after stop');
  });

  it('restartDone: none of the replicas still ready or starting in the published view', () => {
    const { acts } = standby(() => null, [rep('lazy-1', 'http://10.0.0.1:9001'), rep('lazy-2', 'http://10.0.0.1:9002', 'stopping')]);
    assert.equal(acts.restartDone(['lazy-1']), false);
    assert.equal(acts.restartDone(['lazy-2', 'lazy-9']), true);
  });
});
