/**
 * The state record, the published snapshot and forwarded requests in a real etcd: round trips,
 * zero writes (no etcd revision) for an unchanged record, a deposed leader's save refused, pending
 * requests handled once a leader serves, and LEADER_UNAVAILABLE when none does.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LlmgwError } from '../../src/errors/catalogue.js';
import { Requests, type RequestMsg } from '../../src/ha/channel.js';
import { Published } from '../../src/ha/published-channel.js';
import { EtcdStateStore } from '../../src/ha/etcd-state.js';
import type { PublishedSnapshot } from '../../src/ha/published.js';
import { sharedValues } from '../../src/ha/shared.js';
import { initialHealth } from '../../src/reconciler/health.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { startEtcd } from '../harness/etcd.js';
import { rejectsWith } from '../harness/errors.js';
import { startTcpForwarder } from '../harness/tcp-forwarder.js';
import { realTime } from '../harness/real-time.js';
import { until } from '../harness/wait.js';
import { elected, etcdRevision, freshPrefix, sharedEtcd } from '../harness/elections.js';

function someState(n: number): ControllerState {
  return {
    ...emptyState,
    appliedRevision: `rev-${n}`,
    models: { 'model-a': { health: initialHealth('sha256:a'), demand: 1_700_000_000_000 + n } },
    handledRetries: ['commit:abc', `admin:${n}`],
  };
}

/** The same content with every object's keys in another order. */
function reordered(s: ControllerState): ControllerState {
  const flip = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(flip);
    if (v === null || typeof v !== 'object') return v;
    return Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, flip(x)]));
  };
  return flip(s) as ControllerState;
}

describe('state record, snapshot and requests in a real etcd', { timeout: 60_000 }, () => {
  const shared = sharedEtcd(startEtcd);
  /** An instance on etcd, or through a forwarder listening on `viaPort`. */
  const make = shared.make;
  /** An elected instance serving requests with `handle`; the reasons of those it refused. */
  const servingLeader = async (prefix: string, handle: (m: RequestMsg) => Promise<unknown>): Promise<{ refused: string[]; stopServing: () => Promise<void> }> => {
    const leader = make(prefix, 'leader');
    leader.election.start();
    await elected(leader.election);
    const refused: string[] = [];
    const stopServing = await new Requests(leader.client, prefix, 'leader', realTime).serve(leader.election, handle, (r) => refused.push(r.why));
    return { refused, stopServing };
  };
  const revision = etcdRevision;

  it('EtcdStateStore: round trip, no write for an unchanged record over many saves, a deposed leader\'s save refused', async () => {
    const prefix = freshPrefix();
    const a = make(prefix, 'a');
    a.election.start();
    await elected(a.election);
    const store = new EtcdStateStore(a.election, a.client, prefix);
    assert.equal(store.path, `etcd:${prefix}/state/`);
    assert.deepEqual(await store.load(), { state: emptyState, problem: null });

    const s1 = someState(1);
    assert.equal(await store.save(s1), true);
    assert.equal(store.writes, 1);
    const rev = await revision(a);
    for (let i = 0; i < 200; i++) assert.equal(await store.save(i % 2 ? s1 : reordered(s1)), false);
    assert.equal(store.writes, 1);
    assert.equal(await revision(a), rev, 'saving an unchanged record wrote nothing to etcd');

    const b = make(prefix, 'b');
    b.election.start();
    const reader = new EtcdStateStore(b.election, b.client, prefix);
    assert.deepEqual(await reader.load(), { state: s1, problem: null });

    // Hand over: A stops, B leads, loads, and finds A's record; A's store may not write any more.
    const bElected = elected(b.election);
    await a.election.stop();
    await bElected;
    const s2 = someState(2);
    await rejectsWith(store.save(s2), 'LEADER_DEPOSED');
    assert.equal(store.writes, 1);
    const storeB = new EtcdStateStore(b.election, b.client, prefix);
    assert.deepEqual((await storeB.load()).state, s1);
    assert.equal(await storeB.save(s1), false, 'the record just loaded is not written back');
    assert.equal(await storeB.save(s2), true);
    assert.deepEqual((await new EtcdStateStore(b.election, b.client, prefix).load()).state, s2);
  });

  it('EtcdStateStore: a value that is not a state record gives the empty record and ETCD_STATE_CORRUPT naming the key, and is kept aside', async () => {
    const prefix = freshPrefix();
    const a = make(prefix, 'a');
    a.election.start();
    await elected(a.election);
    await a.client.put(`${prefix}/state`).value('{"version": 2, "models": [tru');
    const store = new EtcdStateStore(a.election, a.client, prefix, () => 1234);
    const { state, problem } = await store.load();
    assert.deepEqual(state, emptyState);
    assert.equal(problem?.code, 'ETCD_STATE_CORRUPT');
    assert.ok(problem.message.includes(`etcd:${prefix}/state`), problem.message);
    assert.equal(await a.client.get(`${prefix}/state.corrupt-1234`).string(), '{"version": 2, "models": [tru');
    assert.equal(await store.save(emptyState), true, 'the next save replaces the bad value');
    assert.deepEqual((await store.load()).state, emptyState);
  });

  it('Published: the leader publishes only changes; a standby sees the current snapshot first, then each change', async () => {
    const prefix = freshPrefix();
    const a = make(prefix, 'a');
    a.election.start();
    await elected(a.election);
    const b = make(prefix, 'b');
    const pub = new Published(a.election, a.client, prefix);
    const snap = (n: number): PublishedSnapshot => ({ v: 1, appliedRevision: `rev-${n}`, specValid: true, rejected: null, lastSyncError: null, stateError: null, models: [], nodes: [] });
    await pub.publish(snap(1));
    await pub.publish(snap(1));
    assert.equal(pub.writes, 1);
    const seen: (string | null)[] = [];
    const close = await new Published(b.election, b.client, prefix).watch((v) => seen.push(v?.appliedRevision ?? null));
    try {
      assert.deepEqual(seen.slice(-1), ['rev-1']);
      const first = seen.length;
      await pub.publish(snap(2));
      await pub.publish(snap(2));
      await pub.publish(snap(3));
      await until('two changes seen', 5_000, () => seen.length === first + 2);
      assert.deepEqual(seen.slice(first - 1), ['rev-1', 'rev-2', 'rev-3']);
      assert.equal(pub.writes, 3);
      // A burst handed in while one is written: one write at a time, the latest wins, each caller
      // resolves once a snapshot at least as new as its own is written.
      const burst = await Promise.all([4, 5, 6, 7, 8].map((n) => pub.publish(snap(n))));
      assert.equal(burst.length, 5);
      assert.equal(pub.writes, 5, 'the first of the burst, then only the latest');
      await until('the latest seen', 5_000, () => seen.at(-1) === 'rev-8');
      assert.ok(!seen.includes('rev-5') && !seen.includes('rev-6') && !seen.includes('rev-7'), `superseded ones never written: ${seen.join(' ')}`);
      // A standby cannot publish.
      await rejectsWith(new Published(b.election, b.client, prefix).publish(snap(9)), 'LEADER_DEPOSED');
    } finally {
      await close();
    }
  });

  it('Requests: sent before any leader exists, handled once the leader serves; then new ones; a handler\'s error comes back with its code', async () => {
    const prefix = freshPrefix();
    const sender = make(prefix, 'standby');
    const requests = new Requests(sender.client, prefix, 'standby', realTime);
    const early = requests.send('retry', { model: 'm1' }, 15_000);
    await until('the request in etcd', 5_000, async () => (await sender.client.getAll().prefix(`${prefix}/requests/`).count()) === 1);

    const leader = make(prefix, 'leader');
    leader.election.start();
    await elected(leader.election);
    const handled: RequestMsg[] = [];
    const stopServing = await new Requests(leader.client, prefix, 'leader', realTime).serve(leader.election, async (m) => {
      handled.push(m);
      if (m.kind === 'restart') throw new LlmgwError('NOT_FOUND', 'no replica r9');
      return { done: (m.body as { model: string }).model };
    });
    try {
      assert.deepEqual(await early, { done: 'm1' });
      assert.deepEqual(await requests.send('retry', { model: 'm2' }, 5_000), { done: 'm2' });
      const err = await rejectsWith(requests.send('restart', { replicas: ['r9'] }, 5_000), 'NOT_FOUND');
      assert.equal(err.message, 'no replica r9');
      assert.deepEqual(
        handled.map((m) => [m.kind, m.from]),
        [['retry', 'standby'], ['retry', 'standby'], ['restart', 'standby']],
      );
      assert.equal(new Set(handled.map((m) => m.id)).size, 3);
      // Answered requests are gone; answers go with the sender's lease.
      await until('requests and answers removed', 5_000, async () => (await sender.client.getAll().prefix(`${prefix}/re`).count()) === 0);
    } finally {
      await stopServing();
    }
  });

  it('Requests: with no leader serving, send gives LEADER_UNAVAILABLE after its timeout and leaves nothing behind', async () => {
    const prefix = freshPrefix();
    const sender = make(prefix, 'standby');
    const t0 = Date.now();
    await rejectsWith(new Requests(sender.client, prefix, 'standby', realTime).send('demand', { model: 'm' }, 800), 'LEADER_UNAVAILABLE');
    assert.ok(Date.now() - t0 >= 800);
    await until('the request removed with its lease', 5_000, async () => (await sender.client.getAll().prefix(`${prefix}/`).count()) === 0);
  });
  it('Requests: a leader whose watch was compacted away while it was cut off lists the pending requests again and answers them', async () => {
    const prefix = freshPrefix();
    const fwd = await startTcpForwarder(shared.etcd().clientPort);
    try {
      const leader = make(prefix, 'leader', fwd.port);
      leader.election.start();
      await elected(leader.election);
      const handled: string[] = [];
      const stopServing = await new Requests(leader.client, prefix, 'leader', realTime).serve(leader.election, async (m) => {
        handled.push((m.body as { trigger: string }).trigger);
        return 'ok';
      });
      const sender = make(prefix, 'standby');
      const requests = new Requests(sender.client, prefix, 'standby', realTime);
      try {
        assert.equal(await requests.send('pass', { trigger: 'before' }, 5_000), 'ok');
        fwd.cut();
        const pending = requests.send('pass', { trigger: 'during' }, 10_000);
        await until('the request in etcd', 5_000, async () => (await sender.client.getAll().prefix(`${prefix}/requests/`).count()) === 1);
        // Compact past the leader's watch revision while it cannot see: its watch is cancelled on reconnect.
        await sender.client.kv.compact({ revision: String(await revision(sender)), physical: true });
        fwd.restore();
        assert.equal(await pending, 'ok');
        assert.deepEqual(handled, ['before', 'during']);
        assert.ok(leader.election.isLeader(), 'the cut was shorter than the renew deadline');
      } finally {
        await stopServing();
      }
    } finally {
      await fwd.close();
    }
  });

  it('Requests: a request whose sender gave up while it waited behind another is refused when its turn comes (its lease is checked live), never run', async () => {
    const prefix = freshPrefix();
    const handled: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { refused, stopServing } = await servingLeader(prefix, async (m) => {
      const trigger = (m.body as { trigger: string }).trigger;
      handled.push(trigger);
      if (trigger === 'slow') await gate;
      return 'ok';
    });
    try {
      const sender = make(prefix, 'standby');
      const requests = new Requests(sender.client, prefix, 'standby', realTime);
      const slow = requests.send('pass', { trigger: 'slow' }, 10_000);
      await until('the slow request running', 5_000, () => handled.length === 1);
      // queued behind it; its sender gives up (revokes its lease) before its turn
      await rejectsWith(requests.send('pass', { trigger: 'given-up' }, 600), 'LEADER_UNAVAILABLE');
      await until('the given-up request gone with its lease', 5_000, async () => (await sender.client.getAll().prefix(`${prefix}/requests/`).count()) === 1);
      release();
      assert.equal(await slow, 'ok');
      await until('the given-up request refused', 5_000, () => refused.length === 1);
      assert.deepEqual(handled, ['slow'], 'a request whose sender gave up ran');
      assert.match(refused[0]!, /lease no longer exists/);
    } finally {
      release();
      await stopServing();
    }
  });

  it('Requests: with etcd unreachable or stalled, send ends within its timeout with ETCD_UNAVAILABLE (not later, not INTERNAL)', async () => {
    const prefix = freshPrefix();
    const fwd = await startTcpForwarder(shared.etcd().clientPort);
    try {
      const sender = make(prefix, 'standby', fwd.port);
      const requests = new Requests(sender.client, prefix, 'standby', realTime);
      fwd.stall();
      for (const timeout of [700, 1_500]) {
        const t0 = Date.now();
        await rejectsWith(requests.send('demand', { model: 'm' }, timeout), 'ETCD_UNAVAILABLE');
        const ms = Date.now() - t0;
        assert.ok(ms <= timeout + 250, `stalled: ${ms} ms for a ${timeout} ms timeout`);
      }
      await fwd.close();
      const t0 = Date.now();
      await rejectsWith(requests.send('demand', { model: 'm' }, 1_500), 'ETCD_UNAVAILABLE');
      assert.ok(Date.now() - t0 <= 1_750, `refused: ${Date.now() - t0} ms`);
    } finally {
      await fwd.close();
    }
  });

  it('sharedValues: an engine key in etcd shorter than 16 characters is refused with SECRET_TOO_SHORT naming the key (never its value)', async () => {
    const prefix = freshPrefix();
    const i = make(prefix, 'first');
    await i.client.put(`${prefix}/engine-api-key`).value('short-key-15chr');
    const err = await rejectsWith(sharedValues(i.client, prefix, 'a-local-engine-key-long-enough'), 'SECRET_TOO_SHORT');
    assert.match(err.message, new RegExp(`${prefix}/engine-api-key`));
    assert.ok(!err.message.includes('short-key-15chr'));
    // 16 characters are enough
    await i.client.put(`${prefix}/engine-api-key`).value('sixteen-chars-ok');
    assert.equal((await sharedValues(i.client, prefix, 'a-local-engine-key-long-enough')).engineApiKey, 'sixteen-chars-ok');
  });

  it('Requests: a forged request (no lease, a bogus lease, an unknown kind, a malformed body) is refused with a reason and never run; a real one is', async () => {
    const prefix = freshPrefix();
    const handled: RequestMsg[] = [];
    const { refused, stopServing } = await servingLeader(prefix, async (m) => {
      handled.push(m);
      return 'ran';
    });
    try {
      const forger = make(prefix, 'forger');
      const id = (n: number): string => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
      const put = (n: number, msg: Record<string, unknown>, lease?: string): Promise<unknown> => {
        const p = forger.client.put(`${prefix}/requests/${id(n)}`).value(JSON.stringify({ id: id(n), ...msg }));
        return lease ? p.lease(lease).exec() : p.exec();
      };
      const grant = forger.client.lease(30, { autoKeepAlive: false });
      const realLease = await grant.grant();
      await put(1, { kind: 'restart', body: { all: true }, from: 'standby', lease: '12345' });
      await put(2, { kind: 'restart', body: { all: true }, from: 'standby', lease: realLease });
      await put(3, { kind: 'exec', body: {}, from: 'standby', lease: realLease }, realLease);
      await put(4, { kind: 'restart', body: { all: 'yes' }, from: 'standby', lease: realLease }, realLease);
      await put(5, { kind: 'restart', body: { all: true, cmd: 'x' }, from: 'standby', lease: realLease }, realLease);
      await until('five refusals', 5_000, () => refused.length === 5);
      assert.equal(handled.length, 0, 'a forged request ran');
      assert.match(refused[0]!, /not attached to the sender's lease 12345 \(attached to none\)/);
      assert.match(refused[1]!, /not attached to the sender's lease/);
      assert.match(refused[2]!, /unknown kind "exec"/);
      assert.match(refused[3]!, /malformed body/);
      assert.match(refused[4]!, /unknown body fields cmd/);
      await until('the refused requests deleted', 5_000, async () => (await forger.client.getAll().prefix(`${prefix}/requests/`).count()) === 0);
      // a request as an instance sends it is run
      assert.equal(await new Requests(forger.client, prefix, 'standby', realTime).send('restart', { all: true }, 5_000), 'ran');
      assert.equal(handled.length, 1);
      await grant.revoke();
    } finally {
      await stopServing();
    }
  });
});
