/**
 * The routers a drain waits for (#37 item 7, N13), as the leader reads them from etcd
 * (ha/router-revisions.ts): every instance with a `routed/` key (the published revision its router
 * routes from) or a `routers/` key (registered for the limits, no revision yet: an instance just
 * started, one whose write fails, an older llmgw), but the leader itself. Table tests of the pure
 * reading; the same on real etcd, through two `llmgw serve`, is test/integration/ha-drain-lag.test.ts.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { revisionOf, routersApplied } from '../../src/ha/router-revisions.js';

describe('routersApplied: the other live routers and the revision each routes from', () => {
  const table: [string, Record<string, string>, string[], { id: string; applied: number | null }[]][] = [
    ['alone', { '/p/routed/a': '{"revision":7}' }, ['/p/routers/a'], []],
    ['a standby with its revision, in id order', { '/p/routed/c': '{"revision":9}', '/p/routed/a': '{"revision":7}', '/p/routed/b': '{"revision":8}' }, ['/p/routers/a', '/p/routers/b', '/p/routers/c'], [{ id: 'b', applied: 8 }, { id: 'c', applied: 9 }]],
    ['registered for the limits, no revision written yet: listed with none', { '/p/routed/a': '{"revision":7}' }, ['/p/routers/a', '/p/routers/b'], [{ id: 'b', applied: null }]],
    ['a revision without the limits key (its lease there just lost): listed', { '/p/routed/b': '{"revision":8}' }, [], [{ id: 'b', applied: 8 }]],
    ['a value this version does not read: no revision', { '/p/routed/b': 'seven' }, [], [{ id: 'b', applied: null }]],
    ['keys of another prefix are not routers', { '/q/routed/b': '{"revision":8}' }, ['/q/routers/c'], []],
  ];
  for (const [what, routed, registered, want] of table) test(what, () => assert.deepEqual(routersApplied('/p', 'a', routed, registered), want));
});

describe('revisionOf: a positive safe integer under "revision", else none', () => {
  const table: [string, number | null][] = [
    ['{"revision":12}', 12],
    ['{"revision":0}', null],
    ['{"revision":-3}', null],
    ['{"revision":1.5}', null],
    ['{"revision":"12"}', null],
    ['{}', null],
    ['null', null],
    ['12', null],
    ['not json', null],
  ];
  for (const [text, want] of table) test(text, () => assert.equal(revisionOf(text), want));
});
