/**
 * Scaling under HA (#42) on a real etcd: two routers each carry half of a model's load; each writes
 * its report beside its key (ha/router-shares.ts), and the leader's view of the load is the sum. A
 * router whose instance is gone (its lease revoked) leaves no report behind; one that stops reporting
 * counts as zero after the TTL (scale/decide.ts loadOf).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RouterShares } from '../../src/ha/router-shares.js';
import { LOAD_TTL_MS, loadOf, type LoadReport } from '../../src/scale/decide.js';
import { startEtcd } from '../harness/etcd.js';
import { freshPrefix, sharedEtcd } from '../harness/elections.js';
import { realTime } from '../harness/real-time.js';
import { until } from '../harness/wait.js';

describe('router load on a real etcd', { timeout: 60_000 }, () => {
  const shared = sharedEtcd(startEtcd);

  it('the leader sums both routers\' load; a router gone leaves none; a stale report counts as zero', async () => {
    const prefix = freshPrefix();
    const report = (router: string, busy: number, queued: number) => (): LoadReport => ({ router, at: Date.now(), models: { m: { busy, queued } } });
    const a = new RouterShares(shared.make(prefix, 'a').client, prefix, 'a', 3, 300, realTime);
    const b = new RouterShares(shared.make(prefix, 'b').client, prefix, 'b', 3, 300, realTime);
    a.reportLoad(report('a', 1, 2));
    b.reportLoad(report('b', 1, 3));
    try {
      a.start();
      b.start();
      await until('a reads b\'s report', 10_000, () => a.loadReports().length === 2);
      const sum = loadOf(a.loadReports(), 'm', Date.now());
      assert.deepEqual({ busy: sum.busy, queued: sum.queued, routers: sum.routers }, { busy: 2, queued: 5, routers: 2 });
      // b gone (its lease revoked with it): a's next refreshes read no report of b
      await b.stop();
      await until('b\'s report gone', 10_000, () => a.loadReports().length === 1);
      assert.deepEqual(loadOf(a.loadReports(), 'm', Date.now()).queued, 2);
      // a report older than the TTL counts as zero, never as its figures
      assert.deepEqual(loadOf([{ router: 'x', at: Date.now() - LOAD_TTL_MS - 1000, models: { m: { busy: 9, queued: 9 } } }, ...a.loadReports()], 'm', Date.now()).busy, 1);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });
});
