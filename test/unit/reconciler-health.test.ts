import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { backoffMs, initialHealth, mayStart, retried, setbackNotCounted, startFailed, stayedReady, withDigest, type ModelHealth } from '../../src/reconciler/health.js';

const s = { backoff: { initialMs: 10_000, maxMs: 300_000 }, parkAfterFailures: 5, readyResetMs: 600_000 };
const err = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };

function failTimes(n: number, from: ModelHealth = initialHealth('d1'), t0 = 0): ModelHealth {
  let h = from;
  for (let i = 0; i < n; i++) h = startFailed(h, err, t0 + i, s);
  return h;
}

describe('model health state machine', () => {
  it('backoff doubles from the initial value up to the max', () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 8].map((n) => backoffMs(n, s)), [10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
  });

  const table: { name: string; h: () => ModelHealth; now: number; expect: Partial<ModelHealth> & { mayStart: boolean } }[] = [
    { name: 'fresh model may start', h: () => initialHealth('d1'), now: 0, expect: { consecutiveFailures: 0, parked: null, mayStart: true } },
    { name: 'one failure backs off 10 s', h: () => failTimes(1, initialHealth('d1'), 1000), now: 5000, expect: { consecutiveFailures: 1, nextAttemptAt: 11_000, mayStart: false } },
    { name: 'after the backoff it may start again', h: () => failTimes(1, initialHealth('d1'), 1000), now: 11_000, expect: { consecutiveFailures: 1, mayStart: true } },
    { name: 'four failures: not parked, 80 s backoff', h: () => failTimes(4), now: 3, expect: { consecutiveFailures: 4, parked: null, nextAttemptAt: 3 + 80_000, mayStart: false } },
    { name: 'five failures in a row: parked with the last error', h: () => failTimes(5), now: 10 ** 12, expect: { consecutiveFailures: 5, parked: { since: 4, lastError: err }, nextAttemptAt: null, mayStart: false } },
    { name: 'a new digest unparks and resets', h: () => withDigest(failTimes(5), 'd2'), now: 0, expect: { digest: 'd2', consecutiveFailures: 0, parked: null, lastError: null, mayStart: true } },
    { name: 'the same digest keeps it parked', h: () => withDigest(failTimes(5), 'd1'), now: 10 ** 12, expect: { consecutiveFailures: 5, mayStart: false } },
    { name: 'a retry unparks with a clean count', h: () => retried(failTimes(5), 'c1:m').health, now: 10, expect: { consecutiveFailures: 0, parked: null, lastHandledRetry: 'c1:m', mayStart: true } },
    { name: 'a retry of an unparked model clears its backoff only', h: () => retried(failTimes(2), 'admin:1').health, now: 2, expect: { consecutiveFailures: 2, nextAttemptAt: null, mayStart: true } },
    { name: 'staying ready 10 min resets the count', h: () => stayedReady(failTimes(3), 100, 100 + 600_000, s), now: 0, expect: { consecutiveFailures: 0, lastError: null, mayStart: true } },
    { name: 'ready for less than 10 min keeps the count', h: () => stayedReady(failTimes(3), 100, 100 + 599_999, s), now: 10 ** 9, expect: { consecutiveFailures: 3 } as never },
    { name: 'a setback that is not the model’s fault delays without counting', h: () => setbackNotCounted(initialHealth('d1'), { code: 'NODE_UNREACHABLE', message: 'x' }, 50, s), now: 60, expect: { consecutiveFailures: 0, nextAttemptAt: 10_050, mayStart: false } },
    { name: 'a setback does not unpark', h: () => setbackNotCounted(failTimes(5), { code: 'NODE_UNREACHABLE', message: 'x' }, 50, s), now: 10 ** 12, expect: { consecutiveFailures: 5, mayStart: false } },
  ];
  for (const c of table) {
    it(c.name, () => {
      const h = c.h();
      const { mayStart: want, ...fields } = c.expect;
      for (const [k, v] of Object.entries(fields)) assert.deepEqual(h[k as keyof ModelHealth], v, k);
      if (want !== undefined) assert.equal(mayStart(h, c.now), want);
    });
  }
  it('each retry is handled once', () => {
    const once = retried(failTimes(5), 'c1:m');
    assert.equal(once.outcome, 'unparked');
    const parkedAgain = failTimes(5, once.health, 100);
    assert.equal(retried(parkedAgain, 'c1:m').outcome, 'already-handled');
    assert.equal(retried(parkedAgain, 'c2:m').outcome, 'unparked');
  });
});
