/**
 * The queue wait in the scaling signal (#42): each router reports, per model, how long the oldest
 * request waiting for a slot (or the model's activation) has waited; the fleet's figure is the longest
 * over the fresh reports, aged by each report's age, and none where nothing waits or the report is
 * too old. The change's message says it; the HA report carries it through etcd's JSON.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { LOAD_TTL_MS, decideScale, loadOf, type LoadReport } from '../../src/scale/decide.js';
import { reportOf } from '../../src/ha/router-shares.js';

const T0 = 1_700_000_000_000;
const at = (router: string, ago: number, busy: number, queued: number, waitMs?: number): LoadReport => ({ router, at: T0 - ago, models: { m: { busy, queued, ...(waitMs === undefined ? {} : { waitMs }) } } });

describe('the queue wait in the load', () => {
  const table: [name: string, reports: LoadReport[], waitMs: number][] = [
    ['one router, 6 s', [at('a', 0, 1, 5, 6000)], 6000],
    ['the longest of two routers, not their sum', [at('a', 0, 1, 2, 6000), at('b', 0, 1, 3, 9000)], 9000],
    ['a report 2 s old: its oldest request has waited 2 s more', [at('a', 2000, 1, 2, 6000)], 8000],
    ['nothing queued: no wait, whatever a figure says', [at('a', 0, 1, 0, 6000)], 0],
    ['a report without the figure (an older router): none', [at('a', 0, 1, 5)], 0],
    ['a silent router\'s figure is not read', [at('a', LOAD_TTL_MS + 1, 1, 5, 60_000), at('b', 0, 1, 1, 1000)], 1000],
    ['no report', [], 0],
  ];
  for (const [name, reports, waitMs] of table) {
    it(name, () => {
      assert.equal(loadOf(reports, 'm', T0).waitMs, waitMs);
    });
  }

  it('the change up says how long the oldest request waited', () => {
    const scale = { target: 0.8, upAfterMs: 10_000, downAfterMs: 300_000 };
    const load = loadOf([at('a', 0, 1, 5, 9800)], 'm', T0);
    const d = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load, record: { count: 1, upSince: T0 - 10_000 }, now: T0 });
    assert.equal(d.change?.why, '1 busy and 5 waiting on 1 slot for 10 s, the oldest waiting 9.8 s (target 80 % busy)');
    // no figure: the message as before
    const plain = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: { busy: 1, queued: 5 }, record: { count: 1, upSince: T0 - 10_000 }, now: T0 });
    assert.equal(plain.change?.why, '1 busy and 5 waiting on 1 slot for 10 s (target 80 % busy)');
  });

  it('an HA report read from etcd keeps the wait; a bad or absent one is left out, the rest kept', () => {
    assert.deepEqual(reportOf(JSON.stringify(at('a', 0, 1, 5, 4200))), [at('a', 0, 1, 5, 4200)]);
    assert.deepEqual(reportOf(JSON.stringify({ router: 'a', at: T0, models: { m: { busy: 1, queued: 5, waitMs: 'long' } } })), [at('a', 0, 1, 5)]);
    assert.deepEqual(reportOf(JSON.stringify({ router: 'a', at: T0, models: { m: { busy: 1, queued: 5, waitMs: -3 } } })), [at('a', 0, 1, 5)]);
  });
});
