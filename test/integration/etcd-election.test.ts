/**
 * Election and guarded writes against a real etcd (Debian's etcd-server): one leader among three,
 * failover on stop(), strictly increasing epochs, and fencing across a partition made by a TCP
 * forwarder between one instance and etcd (stalled: packets vanish, sockets stay open).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { isLlmgwError, type ReasonRef } from '../../src/errors/catalogue.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { isCode, rejectsWith } from '../harness/errors.js';
import { startTcpForwarder, type TcpForwarder } from '../harness/tcp-forwarder.js';
import { until } from '../harness/wait.js';
import { FAST, elected, freshPrefix, instance, mono, type Instance } from './etcd-helpers.js';

/** The first of `all` elected with an epoch above `epoch` (listening from now on). */
function electedAbove(all: readonly Instance[], epoch: number): Promise<Instance> {
  return new Promise((resolve) => {
    const off: (() => void)[] = [];
    for (const i of all) {
      const on = (e: number): void => {
        if (e <= epoch) return;
        for (const f of off) f();
        resolve(i);
      };
      i.election.on('elected', on);
      off.push(() => i.election.off('elected', on));
    }
  });
}

describe('Election on a real etcd', { timeout: 60_000 }, () => {
  let etcd: EtcdInstance;
  const open: Instance[] = [];
  const make = (endpoint: string, prefix: string, id: string, extra: Parameters<typeof instance>[3] = {}): Instance => {
    const i = instance(endpoint, prefix, id, extra);
    open.push(i);
    return i;
  };

  /** a leads (epoch1), b is a standby that sees it. */
  const leaderAndStandby = async (): Promise<{ prefix: string; a: Instance; b: Instance; epoch1: number }> => {
    const prefix = freshPrefix();
    const a = make(etcd.endpoint, prefix, 'a');
    const b = make(etcd.endpoint, prefix, 'b');
    a.election.start();
    const epoch1 = await elected(a.election);
    b.election.start();
    await until(() => b.election.current()?.epoch === epoch1, 'the standby seeing the leader', 5_000);
    return { prefix, a, b, epoch1 };
  };

  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await Promise.all(open.map((i) => i.close()));
    await etcd.stop();
  });

  it('three instances: exactly one leads, all agree who; stop() hands over within the lease time, epochs strictly increase', async () => {
    const prefix = freshPrefix();
    const all = ['a', 'b', 'c'].map((id) => make(etcd.endpoint, prefix, id));
    for (const i of all) i.election.start();
    const leaders = (): Instance[] => all.filter((i) => i.election.isLeader());
    await until(() => leaders().length === 1 && all.every((i) => i.election.current()?.id === leaders()[0]!.election.id), 'one leader that every instance sees', 10_000);

    const epochs: number[] = [];
    let lastWriter = '';
    let live = all;
    for (let round = 0; round < 2; round++) {
      const [leader] = live.filter((i) => i.election.isLeader());
      assert.ok(leader);
      const epoch = leader.election.epoch!;
      assert.equal(leader.election.current()?.epoch, epoch);
      epochs.push(epoch);
      await leader.election.guardedPut(`${prefix}/probe`, `from ${leader.election.id}`);
      lastWriter = leader.election.id;
      const rest = live.filter((i) => i !== leader);
      assert.ok(rest.every((i) => !i.election.isLeader() && i.election.epoch === null));

      const t0 = mono();
      const next = Promise.race(rest.map((i) => elected(i.election).then(() => i)));
      await leader.election.stop();
      const successor = await next;
      const took = mono() - t0;
      assert.ok(took < FAST.leaseTtlSeconds * 1000, `handover took ${Math.round(took)} ms, more than the ${FAST.leaseTtlSeconds} s lease`);
      assert.equal(rest.filter((i) => i.election.isLeader()).length, 1);
      assert.ok(successor.election.epoch! > epoch, `epoch ${successor.election.epoch} after ${epoch}`);
      await rejectsWith(leader.election.guardedPut(`${prefix}/probe`, 'from a stopped leader'), 'LEADER_DEPOSED');
      live = rest;
    }
    const [last] = live.filter((i) => i.election.isLeader());
    epochs.push(last!.election.epoch!);
    assert.deepEqual([...epochs].sort((x, y) => x - y), epochs);
    assert.equal(new Set(epochs).size, epochs.length);
    // The stopped leaders' refused writes left the last accepted one in place.
    assert.equal(await last!.client.get(`${prefix}/probe`).string(), `from ${lastWriter}`);
  });
  it('a leader cut off by a stalled connection stops leading before its lease can expire; the standby takes over after it expires; the old leader\'s write is refused', async () => {
    const prefix = freshPrefix();
    const fwd = await startTcpForwarder(etcd.clientPort);
    try {
      const a = make(`http://127.0.0.1:${fwd.port}`, prefix, 'a');
      a.election.start();
      const epochA = await elected(a.election);
      const b = make(etcd.endpoint, prefix, 'b');
      b.election.start();
      await until(() => b.election.current()?.epoch === epochA, 'the standby seeing the leader', 5_000);

      // Every time isLeader() says yes, the last good renewal was sent less than the renew deadline ago.
      let samples = 0;
      const sampler = setInterval(() => {
        const sent = a.election.lastRenewalSent;
        if (a.election.isLeader()) {
          samples++;
          assert.ok(sent !== null && mono() - sent < FAST.renewDeadlineMs);
        }
      }, 5);
      const deposed = once(a.election, 'deposed') as Promise<[ReasonRef]>;
      const bElected = elected(b.election);
      fwd.stall();
      const [reason] = await deposed;
      const deposedAt = mono();
      const lastSent = a.election.lastRenewalSent!;
      clearInterval(sampler);
      assert.equal(reason.code, 'LEADER_RENEWAL_OVERDUE', reason.message);
      assert.equal(a.election.isLeader(), false);
      assert.equal(a.election.epoch, null);
      assert.ok(samples > 0);
      assert.ok(deposedAt - lastSent >= FAST.renewDeadlineMs, `deposed ${Math.round(deposedAt - lastSent)} ms after the last good renewal was sent`);
      assert.ok(deposedAt - lastSent < FAST.leaseTtlSeconds * 1000, `deposed ${Math.round(deposedAt - lastSent)} ms after the last good renewal was sent: the lease (${FAST.leaseTtlSeconds} s) may have expired`);

      const epochB = await bElected;
      const electedAt = mono();
      // etcd let the lease expire (A's revoke could not get through): B won only after the TTL.
      assert.ok(electedAt - lastSent >= FAST.renewDeadlineMs, `B elected ${Math.round(electedAt - lastSent)} ms after A's last renewal`);
      assert.ok(epochB > epochA);

      fwd.restore();
      await rejectsWith(a.election.guardedPut(`${prefix}/probe`, 'from the deposed leader'), 'LEADER_DEPOSED');
      assert.equal(await b.client.get(`${prefix}/probe`).string(), null);
      // Once etcd answers again, A follows B.
      await until(() => a.election.current()?.epoch === epochB && a.election.reachable, 'the old leader seeing the new one', 10_000);
      assert.equal(a.election.isLeader(), false);
      assert.ok(b.election.isLeader());
    } finally {
      await fwd.close();
    }
  });

  it('fencing in etcd alone: a leader that never notices it was cut off (its renewal clock frozen) has its write refused and steps down', async () => {
    const prefix = freshPrefix();
    const fwd = await startTcpForwarder(etcd.clientPort);
    try {
      // monotonic frozen at 0: the renewal can never look overdue, so only etcd's guard stops it.
      const a = make(`http://127.0.0.1:${fwd.port}`, prefix, 'a', { monotonic: () => 0 });
      a.election.start();
      const epochA = await elected(a.election);
      const b = make(etcd.endpoint, prefix, 'b');
      b.election.start();
      await until(() => b.election.current()?.epoch === epochA, 'the standby seeing the leader', 5_000);
      const deposed: ReasonRef[] = [];
      a.election.on('deposed', (r) => deposed.push(r));

      fwd.stall();
      const epochB = await elected(b.election);
      assert.ok(epochB > epochA);
      assert.ok(a.election.isLeader(), 'the frozen-clock leader still believes it leads');
      assert.equal(deposed.length, 0);

      // Drop the stalled connections (their queued watch events with them) and let A dial again.
      fwd.cut();
      fwd.restore();
      // The first attempts may find gRPC still backing off from the cut (ETCD_UNAVAILABLE, nothing
      // written); the first one etcd answers is refused.
      let refused: unknown = null;
      await until(async () => {
        try {
          await a.election.guardedPut(`${prefix}/probe`, 'from the deposed leader');
          assert.fail('etcd accepted a write of the deposed leader');
        } catch (e) {
          if (isLlmgwError(e, 'ETCD_UNAVAILABLE')) return false;
          refused = e;
          return true;
        }
      }, 'a write that etcd answers', 10_000, 100);
      isCode('LEADER_DEPOSED')(refused);
      assert.equal(a.election.isLeader(), false);
      assert.equal(deposed.length, 1);
      assert.equal(deposed[0]!.code, 'LEADER_DEPOSED');
      assert.equal(await b.client.get(`${prefix}/probe`).string(), null);
      await b.election.guardedPut(`${prefix}/probe`, 'from the new leader');
      assert.equal(await b.client.get(`${prefix}/probe`).string(), 'from the new leader');
    } finally {
      await fwd.close();
    }
  });

  it('a cut connection (refused, reset) deposes the leader the same way, and it leads again once etcd is back and nobody else campaigns', async () => {
    const prefix = freshPrefix();
    const fwd = await startTcpForwarder(etcd.clientPort);
    try {
      const a = make(`http://127.0.0.1:${fwd.port}`, prefix, 'a');
      a.election.start();
      const epoch1 = await elected(a.election);
      const reachable = once(a.election, 'reachable') as Promise<[boolean]>;
      const deposed = once(a.election, 'deposed') as Promise<[ReasonRef]>;
      fwd.cut();
      const [reason] = await deposed;
      const lastSent = a.election.lastRenewalSent!;
      assert.equal(reason.code, 'LEADER_RENEWAL_OVERDUE');
      assert.ok(mono() - lastSent < FAST.leaseTtlSeconds * 1000);
      assert.deepEqual(await reachable, [false]);
      assert.equal(a.election.lastError?.code, 'ETCD_UNAVAILABLE');
      fwd.restore();
      const epoch2 = await elected(a.election);
      assert.ok(epoch2 > epoch1);
      assert.equal(a.election.reachable, true);
    } finally {
      await fwd.close();
    }
  });
  it('a leader whose key is deleted by hand, or whose lease is revoked, steps down (LEADER_DEPOSED) and a new epoch leads', async () => {
    const { prefix, a, b, epoch1 } = await leaderAndStandby();

    const deposed = once(a.election, 'deposed') as Promise<[ReasonRef]>;
    const next = electedAbove([a, b], epoch1);
    await a.client.delete().key(`${prefix}/leader`);
    const [reason] = await deposed;
    assert.equal(reason.code, 'LEADER_DEPOSED', reason.message);
    const second = await next;
    const epoch2 = second.election.epoch!;
    assert.ok(epoch2 > epoch1);

    const leaseOf = async (): Promise<string> => (await a.client.get(`${prefix}/leader`).exec()).kvs[0]!.lease;
    const deposed2 = once(second.election, 'deposed') as Promise<[ReasonRef]>;
    const third = electedAbove([a, b], epoch2);
    await a.client.leaseClient.leaseRevoke({ ID: await leaseOf() });
    const [reason2] = await deposed2;
    assert.equal(reason2.code, 'LEADER_DEPOSED', reason2.message);
    assert.ok((await third).election.epoch! > epoch2);
  });

  it('the leader key overwritten by hand (a put naming another instance, on no lease): the leader steps down (LEADER_KEY_FORGED), the key is removed, nobody follows it, a new epoch leads', async () => {
    const { prefix, a, b, epoch1 } = await leaderAndStandby();
    const followed: string[] = [];
    for (const i of [a, b]) i.election.on('leader', (l) => l && followed.push(`${l.id}@${l.epoch}`));

    const deposed = once(a.election, 'deposed') as Promise<[ReasonRef]>;
    const next = electedAbove([a, b], epoch1);
    await a.client.put(`${prefix}/leader`).value(JSON.stringify({ id: 'b', label: 'forged', since: 1 }));
    const [reason] = await deposed;
    assert.equal(reason.code, 'LEADER_KEY_FORGED', reason.message);
    const second = await next;
    assert.ok(second.election.epoch! > epoch1);
    const kv = (await a.client.get(`${prefix}/leader`).exec()).kvs[0]!;
    assert.equal(Number(kv.create_revision), second.election.epoch, 'the key is the new leader\'s');
    assert.notEqual(kv.lease, '0');
    assert.ok(!followed.includes(`b@${epoch1}`), `an instance followed the forged record: ${followed.join(', ')}`);
  });

  it('resignTerm (a term the reconciler ended): deposed at once, the key gone, a new epoch leads long before the lease could expire; revision() bounds every epoch', async () => {
    const prefix = freshPrefix();
    const slow = { leaseTtlSeconds: 30, renewDeadlineMs: 20_000, retryPeriodMs: 300 };
    const all = ['a', 'b'].map((id) => make(etcd.endpoint, prefix, id, slow));
    for (const i of all) i.election.start();
    await until(() => all.filter((i) => i.election.isLeader()).length === 1, 'one leader', 10_000);
    const leader = all.find((i) => i.election.isLeader())!;
    const epoch = leader.election.epoch!;
    assert.ok((await leader.election.revision()) >= epoch);
    const deposed = once(leader.election, 'deposed') as Promise<[ReasonRef]>;
    const next = electedAbove(all, epoch);
    const t0 = mono();
    leader.election.resignTerm({ code: 'STATUS_EPOCH_STALE', message: 'the status branch holds a newer epoch' });
    const [reason] = await deposed;
    assert.equal(reason.code, 'STATUS_EPOCH_STALE');
    assert.equal(leader.election.isLeader(), false);
    const successor = await next;
    const took = mono() - t0;
    assert.ok(took < 5_000, `a new leader after ${Math.round(took)} ms (lease ${slow.leaseTtlSeconds} s)`);
    assert.ok(successor.election.epoch! > epoch);
    assert.ok((await successor.election.revision()) >= successor.election.epoch!);
  });
});
