/**
 * A three-member etcd cluster (real etcd processes on loopback), the clients given every endpoint:
 * losing one member does not depose the leader (its renewals go to the others in time) and its
 * guarded writes go on; losing a second (no quorum) deposes it before its lease can expire.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import type { ReasonRef } from '../../src/errors/catalogue.js';
import { Election } from '../../src/ha/election.js';
import { openEtcd } from '../../src/ha/etcd.js';
import { startEtcdCluster } from '../harness/etcd.js';
import { until } from '../harness/wait.js';
import { elected, freshPrefix, mono } from '../harness/elections.js';

/**
 * Killing the member that leads etcd's own Raft leaves the cluster without a leader for an etcd
 * election timeout or two (1 s by default, randomized up to 2 s), and every request waits. The renew
 * deadline must leave room for that (the defaults, 10 s, do); the 2 s of the other tests does not:
 * it deposed the leader in about one run of three. So: lease 6 s, renew deadline 4 s.
 */
const T = Object.freeze({ leaseTtlSeconds: 6, renewDeadlineMs: 4_000, retryPeriodMs: 500 });

describe('Election on a three-member etcd cluster', { timeout: 90_000 }, () => {
  let cluster: Awaited<ReturnType<typeof startEtcdCluster>>;
  const closers: (() => Promise<void>)[] = [];

  before(async () => {
    cluster = await startEtcdCluster(3);
  });
  after(async () => {
    await Promise.all(closers.map((c) => c()));
    await cluster?.stop();
  });

  const start = (prefix: string, id: string): Election => {
    const client = openEtcd({ hosts: cluster.endpoints, prefix, tls: null, auth: null, ...T }, Date.now);
    const e = new Election(client, { prefix, id, label: id, ...T, logger: pino({ level: 'silent' }) });
    closers.push(async () => {
      await e.stop();
      client.close();
    });
    e.start();
    return e;
  };

  it('one member killed: the leader keeps leading and writing; a second killed (no quorum): it is deposed before its lease can expire', async () => {
    const prefix = freshPrefix();
    const a = start(prefix, 'a');
    const epoch = await elected(a);
    const b = start(prefix, 'b');
    await until('the standby seeing the leader', 5_000, () => b.current()?.epoch === epoch);
    const deposed: ReasonRef[] = [];
    a.on('deposed', (r) => deposed.push(r));

    cluster.members[0]!.kill();
    const killedAt = mono();
    // Renewed well past the point where a lapse would have deposed it, and writing, with no deposition.
    await until('renewals past the renew deadline after the kill', 15_000, () => deposed.length > 0 || (a.lastRenewalSent ?? 0) > killedAt + T.renewDeadlineMs);
    for (let i = 0; i < 10; i++) await a.guardedPut(`${prefix}/probe`, `write ${i}`);
    assert.deepEqual(deposed, []);
    assert.equal(a.isLeader(), true);
    assert.equal(a.epoch, epoch);

    const lost = once(a, 'deposed') as Promise<[ReasonRef]>;
    cluster.members[1]!.kill();
    const [reason] = await lost;
    const at = mono();
    assert.equal(reason.code, 'LEADER_RENEWAL_OVERDUE', reason.message);
    assert.ok(at - a.lastRenewalSent! < T.leaseTtlSeconds * 1000, `deposed ${Math.round(at - a.lastRenewalSent!)} ms after its last good renewal`);
    assert.equal(a.isLeader(), false);
  });
});
