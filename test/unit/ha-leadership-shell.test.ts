/**
 * The Election shell over a fake etcd (test/harness/fake-etcd.ts) with a fake clock and fake
 * timers: three instances electing one leader, a leader cut off deposed before its lease could
 * expire, resign, a deleted, replaced or forged leader key, etcd restored from a backup, a whole
 * failover — each in milliseconds of real time. At every step of the fake clock: never two
 * instances leading at once, and (where no key is removed by hand) no instance leading on a lease
 * etcd no longer has.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { ReasonRef } from '../../src/errors/catalogue.js';
import { Election } from '../../src/ha/election.js';
import { FakeEtcd, type FakeEtcdClient } from '../harness/fake-etcd.js';
import { FakeClock, FakeTimers, ticks } from '../harness/fake-node.js';
import { rejectsWith } from '../harness/errors.js';

/** A small deterministic PRNG, so each run's interleaving is varied and reproducible. */
function rng(seed: number): () => number {
  let x = seed || 1;
  return () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
}

const PREFIX = '/llmgw/f';
const KEY = `${PREFIX}/leader`;
const T = { leaseTtlSeconds: 3, renewDeadlineMs: 2_000, retryPeriodMs: 500 };

interface Member {
  readonly id: string;
  readonly e: Election;
  readonly client: FakeEtcdClient;
  readonly deposed: ReasonRef[];
  readonly elected: number[];
  readonly leaders: (string | null)[];
}

class World {
  readonly clock = new FakeClock();
  readonly timers = new FakeTimers(this.clock);
  readonly etcd = new FakeEtcd(this.clock);
  readonly members: Member[];
  /** Check at every step that a leader's lease is alive in etcd (off where keys are removed by hand). */
  checkLeases = true;

  constructor(ids: readonly string[], timing: Partial<typeof T> = {}) {
    this.members = ids.map((id) => {
      const client = this.etcd.client(id);
      const e = new Election(client, { prefix: PREFIX, id, label: `${id}.test`, ...T, ...timing, clock: this.clock.now, monotonic: this.clock.monotonic, timers: this.timers, logger: pino({ level: 'silent' }) });
      const m: Member = { id, e, client, deposed: [], elected: [], leaders: [] };
      e.on('deposed', (r) => m.deposed.push(r));
      e.on('elected', (epoch) => m.elected.push(epoch));
      e.on('leader', (i) => m.leaders.push(i ? `${i.id}@${i.epoch}` : null));
      return m;
    });
  }

  m(id: string): Member {
    return this.members.find((m) => m.id === id)!;
  }
  leaders(): Member[] {
    return this.members.filter((m) => m.e.isLeader());
  }

  /** The invariants, at one instant of the fake clock. */
  check(): void {
    const l = this.leaders();
    assert.ok(l.length <= 1, `two leaders at once: ${l.map((m) => `${m.id}@${m.e.epoch}`).join(', ')}`);
    if (!this.checkLeases) return;
    for (const m of l) {
      const p = m.e.state.phase;
      assert.ok(p.kind === 'leading' && this.etcd.hasLease(p.term.lease), `${m.id} leads on a lease etcd no longer has`);
    }
  }

  /** Time passes in steps of `stepMs` until `done` holds (or `maxMs`); the invariants hold at every step. */
  async until(done: () => boolean, what: string, maxMs = 10_000, stepMs = 20): Promise<number> {
    const t0 = this.clock.mono;
    for (;;) {
      await ticks(4);
      this.check();
      if (done()) return this.clock.mono - t0;
      if (this.clock.mono - t0 >= maxMs) assert.fail(`${what}: not after ${maxMs} ms of fake time`);
      this.clock.advance(stepMs);
      this.etcd.expire();
      this.timers.fire();
    }
  }

  async run(ms: number, stepMs = 20): Promise<void> {
    const t0 = this.clock.mono;
    await this.until(() => this.clock.mono - t0 >= ms, 'time passing', ms + 1, stepMs);
  }

  /** Exactly one leader, seen by every live instance. */
  async oneLeader(live: readonly Member[] = this.members, maxMs = 10_000): Promise<Member> {
    await this.until(() => {
      const l = live.filter((m) => m.e.isLeader());
      return l.length === 1 && live.every((m) => m.e.current()?.id === l[0]!.id && m.e.current()?.epoch === l[0]!.e.epoch);
    }, 'one leader every instance sees', maxMs);
    return live.find((m) => m.e.isLeader())!;
  }

  async stop(): Promise<void> {
    for (const m of this.members) m.client.restore();
    let done = false;
    const stopping = Promise.all(this.members.map((m) => m.e.stop())).then(() => (done = true));
    for (let i = 0; i < 200 && !done; i++) {
      await ticks(2);
      this.clock.advance(10);
      this.timers.fire();
    }
    await stopping;
  }
}

async function withWorld(ids: readonly string[], f: (w: World) => Promise<void>, timing: Partial<typeof T> = {}): Promise<void> {
  const w = new World(ids, timing);
  try {
    for (const m of w.members) m.e.start();
    await f(w);
  } finally {
    await w.stop();
  }
}

describe('Election over a fake etcd, with a fake clock', () => {
  it('three instances: one leader all agree on; stop() hands over at once; epochs strictly increase; a stopped leader\'s write is refused', async () => {
    await withWorld(['a', 'b', 'c'], async (w) => {
      let live = w.members;
      const epochs: number[] = [];
      let lastWriter = '';
      for (let round = 0; round < 2; round++) {
        const leader = await w.oneLeader(live);
        epochs.push(leader.e.epoch!);
        await leader.e.guardedPut(`${PREFIX}/probe`, `from ${leader.id}`);
        lastWriter = leader.id;
        const rest = live.filter((m) => m !== leader);
        const stopped = leader.e.stop();
        const took = await w.until(() => rest.some((m) => m.e.isLeader()), 'a successor');
        await stopped;
        assert.ok(took <= T.retryPeriodMs + 100, `handover took ${took} ms of fake time (the key was deleted at once)`);
        await rejectsWith(leader.e.guardedPut(`${PREFIX}/probe`, 'from a stopped leader'), 'LEADER_DEPOSED');
        assert.deepEqual(leader.deposed, [], 'stop() emits no deposed');
        live = rest;
      }
      const last = await w.oneLeader(live);
      epochs.push(last.e.epoch!);
      assert.deepEqual([...epochs].sort((x, y) => x - y), epochs);
      assert.equal(new Set(epochs).size, 3);
      assert.equal(w.etcd.get(`${PREFIX}/probe`)?.value, `from ${lastWriter}`, 'the stopped leaders\' refused writes left the last accepted one');
    });
  });

  it('a leader cut off from etcd stops leading before its lease can expire; the standby wins only after it expired; the old write is refused; it follows the new leader', async () => {
    await withWorld(['a', 'b'], async (w) => {
      const a = await w.oneLeader();
      const b = w.members.find((m) => m !== a)!;
      const epochA = a.e.epoch!;
      a.client.cut();
      await w.until(() => a.deposed.length > 0, 'the cut-off leader deposed');
      const deposedAt = w.clock.mono;
      const lastSent = a.e.lastRenewalSent!;
      assert.equal(a.deposed[0]!.code, 'LEADER_RENEWAL_OVERDUE');
      assert.ok(deposedAt - lastSent >= T.renewDeadlineMs && deposedAt - lastSent < T.renewDeadlineMs + 100, `deposed ${deposedAt - lastSent} ms after the last good renewal was sent`);
      assert.equal(a.e.isLeader(), false);
      assert.equal(a.e.epoch, null);
      assert.equal(a.e.reachable, false);
      assert.equal(a.e.lastError?.code, 'ETCD_UNAVAILABLE');

      await w.until(() => b.e.isLeader(), 'the standby elected');
      assert.ok(w.clock.mono - lastSent >= T.leaseTtlSeconds * 1000, `B elected ${w.clock.mono - lastSent} ms after A's last renewal (lease ${T.leaseTtlSeconds} s)`);
      assert.ok(b.e.epoch! > epochA);

      a.client.restore();
      await rejectsWith(a.e.guardedPut(`${PREFIX}/probe`, 'from the deposed leader'), 'LEADER_DEPOSED');
      assert.equal(w.etcd.get(`${PREFIX}/probe`), null);
      await w.until(() => a.e.current()?.epoch === b.e.epoch && a.e.reachable, 'the old leader following the new one');
      assert.equal(a.e.isLeader(), false);
    });
  });

  it('a leader that never sees its renewal overdue (clock frozen) is stopped by the etcd guard: its write refused, deposed', async () => {
    const w = new World(['a', 'b']);
    // a's monotonic clock frozen: its renewals never look overdue, only the guard in etcd can stop it
    const frozen = new Election(w.m('a').client, { prefix: PREFIX, id: 'a2', label: 'a2', ...T, clock: w.clock.now, monotonic: () => 0, timers: w.timers, logger: pino({ level: 'silent' }) });
    const deposed: ReasonRef[] = [];
    frozen.on('deposed', (r) => deposed.push(r));
    w.checkLeases = false;
    try {
      frozen.start();
      await w.until(() => frozen.isLeader(), 'the frozen-clock instance elected');
      w.m('b').e.start();
      w.m('a').client.cut();
      await w.until(() => w.m('b').e.isLeader(), 'b elected once the lease expired');
      assert.ok(frozen.isLeader(), 'the frozen-clock leader still believes it leads');
      w.m('a').client.restore();
      await rejectsWith(frozen.guardedPut(`${PREFIX}/probe`, 'from the deposed leader'), 'LEADER_DEPOSED');
      assert.equal(frozen.isLeader(), false);
      assert.deepEqual(deposed.map((r) => r.code), ['LEADER_DEPOSED']);
      assert.equal(w.etcd.get(`${PREFIX}/probe`), null);
    } finally {
      w.m('a').client.restore();
      const s = frozen.stop();
      await w.stop();
      await s;
    }
  });

  it('resignTerm: deposed with the reconciler\'s reason, the key gone at once, another instance elected long before the lease could expire', async () => {
    await withWorld(
      ['a', 'b', 'c'],
      async (w) => {
        const leader = await w.oneLeader();
        const epoch = leader.e.epoch!;
        leader.e.resignTerm({ code: 'STATUS_EPOCH_STALE', message: 'the status branch holds a newer epoch' });
        assert.equal(leader.e.isLeader(), false);
        assert.deepEqual(leader.deposed.map((r) => r.code), ['STATUS_EPOCH_STALE']);
        const took = await w.until(() => w.members.some((m) => m !== leader && m.e.isLeader()), 'another instance elected');
        assert.ok(took < 2 * T.retryPeriodMs, `a new leader after ${took} ms of fake time (lease 30 s)`);
        const next = await w.oneLeader();
        assert.notEqual(next, leader);
        assert.ok(next.e.epoch! > epoch);
        assert.ok((await next.e.revision()) >= next.e.epoch!);
        // the resigner campaigns again later, and leads when the new leader resigns in turn
        next.e.resignTerm({ code: 'NODE_FENCED', message: 'a node holds a newer fence' });
        await w.until(() => w.members.some((m) => m !== next && m.e.isLeader()), 'a third term');
      },
      { leaseTtlSeconds: 30, renewDeadlineMs: 20_000 },
    );
  });

  it('the leader key deleted by hand, or its lease revoked: the leader steps down (LEADER_DEPOSED) and a new epoch leads', async () => {
    await withWorld(['a', 'b'], async (w) => {
      w.checkLeases = false;
      const first = await w.oneLeader();
      const epoch1 = first.e.epoch!;
      w.etcd.delete(KEY);
      await w.until(() => first.deposed.length === 1, 'the leader deposed');
      assert.equal(first.deposed[0]!.code, 'LEADER_DEPOSED');
      const second = await w.oneLeader();
      assert.ok(second.e.epoch! > epoch1);

      const p = second.e.state.phase;
      assert.ok(p.kind === 'leading');
      const epoch2 = p.term.epoch;
      const before = second.deposed.length;
      w.etcd.revoke(p.term.lease);
      await w.until(() => second.deposed.length === before + 1, 'the second leader deposed');
      assert.equal(second.deposed.at(-1)!.code, 'LEADER_DEPOSED');
      const third = await w.oneLeader();
      assert.ok(third.e.epoch! > epoch2);
    });
  });

  it('the leader key overwritten in place by someone else (naming another instance, no lease): LEADER_KEY_FORGED, the key removed, a new epoch leads, nobody follows the forgery', async () => {
    await withWorld(['a', 'b'], async (w) => {
      w.checkLeases = false;
      const leader = await w.oneLeader();
      const other = w.members.find((m) => m !== leader)!;
      const epoch = leader.e.epoch!;
      w.etcd.put(KEY, JSON.stringify({ id: other.id, label: 'forged', since: 1 }));
      await w.until(() => leader.deposed.length === 1, 'the leader steps down');
      assert.equal(leader.deposed[0]!.code, 'LEADER_KEY_FORGED');
      const next = await w.oneLeader();
      assert.ok(next.e.epoch! > epoch);
      for (const m of w.members) assert.ok(!m.leaders.includes(`${other.id}@${epoch}`), `${m.id} followed the forged record`);
    });
  });

  it('a leader key with a create revision above etcd\'s revision (no leader of this etcd made it): removed, never followed; a real leader is elected', async () => {
    await withWorld(['a', 'b', 'c'], async (w) => {
      w.checkLeases = false;
      const leader = await w.oneLeader();
      const forgedEpoch = 999_999_999_999;
      w.etcd.forge(KEY, { value: JSON.stringify({ id: 'mallory', label: 'forged', since: 1 }), createRevision: forgedEpoch, modRevision: w.etcd.revision, lease: '0' });
      await w.until(() => leader.deposed.length === 1, 'the leader deposed');
      assert.equal(leader.deposed[0]!.code, 'LEADER_KEY_FORGED');
      const next = await w.oneLeader();
      assert.ok(next.e.epoch! < forgedEpoch);
      for (const m of w.members) assert.ok(m.leaders.every((l) => !l?.startsWith('mallory')), `${m.id} followed the forged key`);
      assert.ok(w.members.some((m) => m.e.keyProblem?.code === 'LEADER_KEY_FORGED'), 'the forgery is there for status to show');
    });
  });

  it('etcd restored from a backup (revisions go back): the leader of the lost future is deposed, the restored record removed, one leader within the lease time', async () => {
    await withWorld(['a', 'b', 'c'], async (w) => {
      w.checkLeases = false; // the restore brings back a lease with a fresh TTL that its holder gave up
      const first = await w.oneLeader();
      const backup = w.etcd.snapshot();
      // an hour of epochs later
      first.client.cut();
      const second = await w.oneLeader(w.members.filter((m) => m !== first));
      first.client.restore();
      for (let i = 0; i < 20; i++) await second.e.guardedPut(`${PREFIX}/state`, `write ${i}`);
      await w.oneLeader();
      const epoch2 = second.e.epoch!;
      assert.ok(backup.revision < epoch2);

      w.etcd.restore(backup);
      assert.ok(w.etcd.revision < epoch2, 'the revision went back below the leader\'s epoch');
      const terms = new Map(w.members.map((m) => [m, m.elected.length]));
      const took = await w.until(() => {
        const l = w.leaders();
        // a term begun after the restore (it may be the same instance, even with the same epoch number: etcd's revisions repeat)
        return l.length === 1 && l[0]!.elected.length > terms.get(l[0]!)! && w.members.every((m) => m.e.current()?.epoch === l[0]!.e.epoch && m.e.current()?.id === l[0]!.id);
      }, 'one new leader after the restore');
      assert.ok(second.deposed.length > 0, 'the leader of the lost future was deposed');
      assert.ok(w.members.some((m) => m.e.keyProblem?.code === 'ETCD_REVISION_WENT_BACK'), 'the restore is there for status to show');
      assert.ok(['LEADER_DEPOSED', 'ETCD_REVISION_WENT_BACK'].includes(second.deposed.at(-1)!.code), second.deposed.at(-1)!.message);
      assert.ok(took < T.leaseTtlSeconds * 1000, `a leader ${took} ms after the restore: the restored record's lease (${T.leaseTtlSeconds} s, renewed by nobody) was not waited out`);
    });
  });

  it('a guarded txn whose extra compare fails: false, the term goes on', async () => {
    await withWorld(['a'], async (w) => {
      const a = await w.oneLeader();
      assert.equal(await a.e.guardedTxn([{ put: `${PREFIX}/x`, value: '1' }], [{ key: `${PREFIX}/x`, column: 'Version', cmp: '>', value: 0 }]), false);
      assert.ok(a.e.isLeader());
      assert.equal(await a.e.guardedTxn([{ put: `${PREFIX}/x`, value: '1' }], [{ key: `${PREFIX}/x`, column: 'Version', cmp: '==', value: 0 }]), true);
      assert.equal(w.etcd.get(`${PREFIX}/x`)?.value, '1');
    });
  });

  it('a leader key that is no leader\'s before any instance starts (no lease: it would never expire), its first removal failing: removed at a later look, then one leader', async () => {
    const w = new World(['a', 'b']);
    try {
      w.etcd.put(KEY, JSON.stringify({ id: 'ghost', label: 'ghost', since: 1 }));
      for (const m of w.members) m.client.cut();
      for (const m of w.members) m.e.start();
      await w.run(300);
      assert.ok(w.etcd.get(KEY), 'nobody could remove it while cut off');
      for (const m of w.members) m.client.restore();
      await w.oneLeader();
      for (const m of w.members) assert.ok(m.leaders.every((l) => !l?.startsWith('ghost')), `${m.id} followed the ghost record`);
    } finally {
      await w.stop();
    }
  });

  it('30 varied interleavings (call latencies, cuts, resigns, keys deleted by hand): never two leaders at once, never a leader on a dead lease, epochs strictly increasing', async () => {
    for (let seed = 1; seed <= 30; seed++) {
      const random = rng(seed);
      const log: string[] = [];
      const w = new World(['a', 'b', 'c']);
      const epochs: number[] = [];
      for (const m of w.members) {
        m.client.latency = () => 1 + Math.floor(random() * 4);
        m.e.on('elected', (epoch) => epochs.push(epoch));
      }
      try {
        for (const m of w.members) m.e.start();
        for (let step = 0; step < 25; step++) {
          const pick = w.members[Math.floor(random() * 3)]!;
          const r = random();
          if (r < 0.15) pick.client.isCut ? pick.client.restore() : pick.client.cut();
          else if (r < 0.25) pick.e.resignTerm({ code: 'NODE_FENCED', message: `seed ${seed}` });
          // by hand, while every instance is connected (a leader cut off would not hear of it before
          // its deadline, and would believe it leads beside the next one; the etcd guard refuses its writes)
          else if (r < 0.3 && w.members.every((m) => !m.client.isCut)) w.etcd.delete(KEY);
          else if (r < 0.45 && pick.e.isLeader()) await pick.e.guardedPut(`${PREFIX}/x`, String(step)).catch(() => undefined);
          // a hand delete revokes nothing: the deposed leader's lease may live on, so only check leases without one
          w.checkLeases = r >= 0.3;
          log.push(`${step}: r=${r.toFixed(2)} ${pick.id} cut=${w.members.map((m) => +m.client.isCut).join('')} leaders=${w.leaders().map((m) => m.id)}`);
          await w.run(50 + Math.floor(random() * 400), 50).catch((e: unknown) => {
            throw new Error(`seed ${seed}: ${(e as Error).message}\n${log.join('\n')}`);
          });
        }
        for (const m of w.members) m.client.restore();
        await w.oneLeader();
        assert.deepEqual([...epochs].sort((x, y) => x - y), epochs, `seed ${seed}: epochs out of order`);
        assert.equal(new Set(epochs).size, epochs.length, `seed ${seed}: an epoch elected twice`);
      } finally {
        await w.stop();
      }
    }
  });

  it('a whole failover (leader cut off, deposed, lease expired, standby elected) takes milliseconds of real time', async () => {
    const t0 = performance.now();
    let fake = 0;
    await withWorld(['a', 'b', 'c'], async (w) => {
      const a = await w.oneLeader();
      const cutAt = w.clock.mono;
      a.client.cut();
      const b = await w.oneLeader(w.members.filter((m) => m !== a));
      assert.ok(b.e.epoch! > a.elected[0]!);
      fake = w.clock.mono - cutAt;
    });
    const real = performance.now() - t0;
    // the failover spans at least the lease (seconds of fake time), and the whole world takes less real time than that
    assert.ok(fake >= T.leaseTtlSeconds * 1000, `the failover took ${fake} ms of fake time (lease ${T.leaseTtlSeconds} s)`);
    assert.ok(real < fake, `the failover took ${Math.round(real)} ms of real time for ${fake} ms of fake time`);
  });
});
