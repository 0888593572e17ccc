/**
 * Router shares on a real etcd (#37 item 4, N6): three routers count themselves and take ranks by id,
 * so a `concurrency: 1` key is admitted by exactly one of them; a fourth router started while its
 * etcd link is stalled (the TCP forwarder in the harness) has no count and refuses the limited key
 * (KEY_LIMITS_UNCOUNTED) instead of enforcing the whole limit by itself; once its link is back it
 * counts four and takes its share (0 of 1), and the others count four too.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RouterShares } from '../../src/ha/router-shares.js';
import { KeyLimiter, Ticket, type Refusal } from '../../src/router/limits.js';
import { startEtcd } from '../harness/etcd.js';
import { freshPrefix, sharedEtcd } from '../harness/elections.js';
import { realTime } from '../harness/real-time.js';
import { startTcpForwarder } from '../harness/tcp-forwarder.js';
import { until } from '../harness/wait.js';

const ONE_AT_A_TIME = { requestsPerMinute: null, tokensPerMinute: null, concurrency: 1 };

describe('router shares on a real etcd', { timeout: 60_000 }, () => {
  const shared = sharedEtcd(startEtcd);

  it('three routers: one admits the concurrency-1 key; a fourth behind a stalled link refuses it until it has counted, then takes its share', async () => {
    const prefix = freshPrefix();
    const shares = ['a', 'b', 'c'].map((id) => new RouterShares(shared.make(prefix, id).client, prefix, id, 3, 300, realTime));
    const fwd = await startTcpForwarder(shared.etcd().clientPort);
    fwd.stall();
    const d = new RouterShares(shared.make(prefix, 'd', fwd.port).client, prefix, 'd', 3, 300, realTime);
    try {
      for (const s of shares) s.start();
      await until('a, b and c count three', 10_000, () => shares.every((s) => s.routers()?.routers === 3));
      assert.deepEqual(shares.map((s) => s.routers()), [{ routers: 3, rank: 0 }, { routers: 3, rank: 1 }, { routers: 3, rank: 2 }]);
      const admitted = shares.map((s) => new KeyLimiter(() => 0, () => s.routers()).admit('k', 'm', ONE_AT_A_TIME, null) instanceof Ticket);
      assert.deepEqual(admitted, [true, false, false], 'one request at a time over the three');

      d.start();
      const limiter = new KeyLimiter(() => 0, () => d.routers());
      const r = limiter.admit('k', 'm', ONE_AT_A_TIME, null) as Refusal;
      assert.equal(d.routers(), null, 'no count through a stalled link');
      assert.equal(r.code, 'KEY_LIMITS_UNCOUNTED');
      assert.ok(limiter.admit('free', 'm', null, null) instanceof Ticket, 'a key without limits is served');

      fwd.restore();
      await until('d counts four', 20_000, () => d.routers()?.routers === 4);
      assert.deepEqual(d.routers(), { routers: 4, rank: 3 });
      assert.equal((limiter.admit('k', 'm', ONE_AT_A_TIME, null) as Refusal).code, 'KEY_CONCURRENCY_LIMITED', 'its share of 1 over 4 is 0');
      await until('a, b and c count four', 10_000, () => shares.every((s) => s.routers()?.routers === 4));
    } finally {
      await Promise.all([...shares, d].map((s) => s.stop()));
      await fwd.close();
    }
  });
});
