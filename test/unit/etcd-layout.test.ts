/**
 * Table tests of the per-key layout in etcd (pure): diffs, batches under etcd's limits, the head a
 * reader relies on for whole saves, the state record and the published snapshot as entries.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { WriteOp } from '../../src/ha/election.js';
import { applyChanges, batchDiff, diffEntries, ETCD_LIMITS, headValue, keyPart, nameOfPart, readKeyed, fitOversized, shrinkJson, txnBytes, type EtcdLimits } from '../../src/ha/keyed-layout.js';
import { publishedEntries, publishedFromEntries } from '../../src/ha/published.js';
import { stateEntries, stateFromEntries } from '../../src/ha/state-layout.js';
import { canonicalJson } from '../../src/ha/canonical-json.js';
import { LlmgwError } from '../../src/errors/catalogue.js';
import { initialHealth } from '../../src/reconciler/health.js';
import { emptyState, MAX_HANDLED_RETRIES, retryHandled, RETRY_CHUNK, STATE_VERSION, type ControllerState } from '../../src/reconciler/state.js';
import { bigPublished, bigState, modelName } from '../harness/big-fleet.js';

const m = (o: Record<string, string>): Map<string, string> => new Map(Object.entries(o));
const keysOf = (ops: readonly WriteOp[]): string[] => ops.map((op) => ('put' in op ? `put ${op.put}` : `del ${op.delete}`));

describe('diffEntries: only what changed', () => {
  const cases: { name: string; prev: Record<string, string>; next: Record<string, string>; puts: string[]; deletes: string[] }[] = [
    { name: 'equal: nothing', prev: { a: '1', b: '2' }, next: { b: '2', a: '1' }, puts: [], deletes: [] },
    { name: 'from nothing: every entry', prev: {}, next: { a: '1', b: '2' }, puts: ['a', 'b'], deletes: [] },
    { name: 'one value changed', prev: { a: '1', b: '2' }, next: { a: '1', b: '3' }, puts: ['b'], deletes: [] },
    { name: 'one gone, one new', prev: { a: '1', b: '2' }, next: { a: '1', c: '2' }, puts: ['c'], deletes: ['b'] },
    { name: 'everything gone', prev: { a: '1' }, next: {}, puts: [], deletes: ['a'] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const d = diffEntries(m(c.prev), m(c.next));
      assert.deepEqual(d.puts.map(([k]) => k), c.puts);
      assert.deepEqual(d.deletes, c.deletes);
    });
  }
});

describe('batchDiff: txns under the op and byte limits, the tail in the last', () => {
  const small: EtcdLimits = { maxTxnOps: 3, maxTxnBytes: 200, maxValueBytes: 100 };
  const head: WriteOp = { put: 'b/head', value: 'h' };
  const cases: { name: string; puts: [string, string][]; deletes: string[]; tail: WriteOp[]; batches: string[][] }[] = [
    { name: 'nothing changed: the tail alone', puts: [], deletes: [], tail: [head], batches: [['put b/head']] },
    { name: 'a small diff: one txn with the head', puts: [['x', '1']], deletes: ['y'], tail: [head], batches: [['del b/y', 'put b/x', 'put b/head']] },
    {
      name: 'cut by op count; the head gets a txn of its own when the last is full',
      puts: [['a', '1'], ['b', '1'], ['c', '1']],
      deletes: [],
      tail: [head],
      batches: [['put b/a', 'put b/b', 'put b/c'], ['put b/head']],
    },
    {
      name: 'cut by bytes',
      puts: [['a', 'x'.repeat(90)], ['b', 'x'.repeat(90)], ['c', '1']],
      deletes: [],
      tail: [head],
      batches: [['put b/a'], ['put b/b', 'put b/c', 'put b/head']],
    },
    { name: 'two tail ops stay together', puts: [['a', '1'], ['b', '1']], deletes: [], tail: [head, { delete: 'legacy' }], batches: [['put b/a', 'put b/b'], ['put b/head', 'del legacy']] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const batches = batchDiff({ puts: c.puts, deletes: c.deletes }, 'b', c.tail, small);
      assert.deepEqual(batches.map(keysOf), c.batches);
      for (const b of batches) {
        assert.ok(b.length <= small.maxTxnOps);
        assert.ok(txnBytes(b) <= small.maxTxnBytes, `${txnBytes(b)} bytes`);
      }
    });
  }

  it('5,000 models written from nothing: every txn under the default limits (etcd: 128 ops, 1.5 MiB), the head last', () => {
    const entries = publishedEntries(bigPublished(5_000));
    const batches = batchDiff(diffEntries(new Map(), entries), '/p/published', [{ put: '/p/published/head', value: headValue(entries.size) }]);
    assert.ok(batches.length >= 40, `${batches.length} txns`);
    for (const b of batches) {
      assert.ok(b.length <= 128 && b.length <= ETCD_LIMITS.maxTxnOps);
      assert.ok(txnBytes(b) <= 1.5 * 1024 * 1024 && txnBytes(b) <= ETCD_LIMITS.maxTxnBytes);
    }
    assert.deepEqual(keysOf(batches.at(-1)!).at(-1), 'put /p/published/head');
    assert.equal(batches.flat().length, entries.size + 1);
  });
});

describe('fitOversized: a value past the limit is cut to fit, never refused', () => {
  const limits: EtcdLimits = { maxTxnOps: 10, maxTxnBytes: 10_000, maxValueBytes: 400 };
  const health = (msg: string) => JSON.stringify({ health: { consecutiveFailures: 3, lastError: { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: msg }, parked: { lastError: { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: msg }, since: 5 } } });

  it('values at the limit pass unchanged; a JSON value past it has its long strings cut with a note, its keys in order, the rest kept', () => {
    const atLimit = 'x'.repeat(398);
    const big = health(`unknown model architecture: '${'A'.repeat(5_000)}'`);
    const r = fitOversized([['a', JSON.stringify(atLimit)], ['m', big], ['c', '1']], new Map(), 'b', limits);
    assert.deepEqual(r.puts.map(([k]) => k), ['a', 'm', 'c']);
    assert.equal(r.puts[0]![1], JSON.stringify(atLimit));
    const cut = r.puts[1]![1];
    assert.ok(Buffer.byteLength(cut) <= 400, `${Buffer.byteLength(cut)} bytes`);
    const v = JSON.parse(cut) as { health: { consecutiveFailures: number; parked: { since: number; lastError: { code: string; message: string } } } };
    assert.equal(v.health.consecutiveFailures, 3);
    assert.equal(v.health.parked.since, 5);
    assert.equal(v.health.parked.lastError.code, 'REPLICA_UNKNOWN_ARCHITECTURE', 'short strings stay whole');
    assert.match(v.health.parked.lastError.message, /^unknown model architecture: 'A+… \(\d+ bytes cut\)$/);
    assert.deepEqual(Object.keys(JSON.parse(cut) as object), ['health']);
    assert.deepEqual(r.cuts, [{ entry: 'm', bytes: Buffer.byteLength(big), written: Buffer.byteLength(cut) }]);
    assert.equal(r.leftOutNew, 0);
  });

  it('the same cut as etcd holds is not put again; one that cannot be cut is left out (a new one counted apart)', () => {
    const big = health('A'.repeat(5_000));
    const once = fitOversized([['m', big]], new Map(), 'b', limits).puts[0]![1];
    const again = fitOversized([['m', big]], new Map([['m', once]]), 'b', limits);
    assert.deepEqual(again.puts, []);
    assert.equal(again.cuts.length, 1);
    const notJson = 'x'.repeat(500);
    const manyKeys = JSON.stringify(Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`k${i}`, i])));
    const r = fitOversized([['old', notJson], ['new', manyKeys]], new Map([['old', '"before"']]), 'b', limits);
    assert.deepEqual(r.puts, []);
    assert.deepEqual(r.cuts.map((c) => [c.entry, c.written]), [['old', null], ['new', null]]);
    assert.equal(r.leftOutNew, 1);
  });

  it('the room of one value is also what one op may carry in a txn (key included)', () => {
    const tight: EtcdLimits = { maxTxnOps: 10, maxTxnBytes: 450, maxValueBytes: 10_000 };
    const r = fitOversized([['m', health('B'.repeat(1_000))]], new Map(), 'a-long-base', tight);
    assert.ok(txnBytes([{ put: 'a-long-base/m', value: r.puts[0]![1] }]) <= 450);
  });

  it('shrinkJson: the least cut that fits', () => {
    const text = JSON.stringify({ a: 'x'.repeat(10_000), b: 'short' });
    const out = shrinkJson(text, 9_000)!;
    const v = JSON.parse(out) as { a: string; b: string };
    assert.equal(v.b, 'short');
    assert.ok(Buffer.byteLength(v.a) <= 8 * 1024 && Buffer.byteLength(v.a) > 1024, `${Buffer.byteLength(v.a)}`);
    assert.equal(shrinkJson('{not json', 10), null);
  });
});

describe('readKeyed: a reader sees whole saves only', () => {
  const kv = (key: string, value: string, modRevision: number) => ({ key, value, modRevision });
  const cases: { name: string; kvs: ReturnType<typeof kv>[]; head: boolean; complete: boolean; rereadAt: number | null; problem?: RegExp }[] = [
    { name: 'nothing there', kvs: [], head: false, complete: false, rereadAt: null },
    { name: 'entries without a head: a first save half-way', kvs: [kv('b/a', '1', 5)], head: false, complete: false, rereadAt: null },
    { name: 'a complete save', kvs: [kv('b/a', '1', 5), kv('b/c', '1', 6), kv('b/head', headValue(2), 6)], head: true, complete: true, rereadAt: null },
    { name: 'an entry newer than the head: read again at the head', kvs: [kv('b/a', '1', 9), kv('b/c', '1', 6), kv('b/head', headValue(2), 6)], head: true, complete: false, rereadAt: 6 },
    { name: 'an entry deleted by a save half-way (the count is off)', kvs: [kv('b/a', '1', 5), kv('b/head', headValue(2), 6)], head: true, complete: false, rereadAt: 6 },
    { name: 'a head this version does not read', kvs: [kv('b/a', '1', 5), kv('b/head', '{"v":7}', 6)], head: true, complete: false, rereadAt: null, problem: /not one this version reads/ },
    { name: 'keys of another base are not entries', kvs: [kv('b/a', '1', 5), kv('bx/a', '1', 9), kv('b/head', headValue(1), 6)], head: true, complete: true, rereadAt: null },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const r = readKeyed(c.kvs, 'b');
      assert.equal(r.head, c.head);
      assert.equal(r.complete, c.complete);
      assert.equal(r.rereadAt, c.rereadAt);
      if (c.problem) assert.match(r.problem ?? '', c.problem);
      else assert.equal(r.problem, null);
    });
  }

  it('applyChanges: puts and deletes of a watch applied at the head', () => {
    assert.deepEqual([...applyChanges(m({ a: '1', b: '2' }), new Map([['b', null], ['c', '3'], ['a', '9']]))], [['a', '9'], ['c', '3']]);
  });

  it('keyPart: names with / and % round trip and never make a deeper key', () => {
    for (const name of ['plain', 'a/b', '100%', '%2F', 'x/%/y']) {
      assert.ok(!keyPart(name).includes('/'));
      assert.equal(nameOfPart(keyPart(name)), name);
    }
  });
});

describe('the state record as entries', () => {
  /** A replica entry of each phase, and avoided nodes (one of a model whose name holds '@'). */
  const varied = (): ControllerState => {
    const s = bigState(20);
    const [one, two, three] = [modelName(1), modelName(2), modelName(3)];
    return {
      ...s,
      models: {
        ...s.models,
        [three]: { ...s.models[three]!, avoid: { n1: 13 } },
        'odd@name': { health: initialHealth('sha256:odd'), avoid: { n2: 14 } },
      },
      replicas: {
        ...s.replicas,
        'r-1': { model: one, node: 'n1', digest: 'd', startedAt: 5, phase: { kind: 'ready', since: 6, seen: false, endpoint: 'http://h:9000' } },
        'r-2': { model: 'gone-model', node: 'n2', digest: 'd', startedAt: 7, phase: { kind: 'launching' } },
        'r-3': { model: two, node: 'n1', digest: 'd', startedAt: 1, phase: { kind: 'leaving', why: 'stop', since: 8, reason: 'failed', drain: false } },
        'r-4': { model: one, node: 'n2', digest: 'd', startedAt: 2, phase: { kind: 'leaving', why: 'surge', since: 10 }, restartAsked: 9 },
        'r-5': { model: two, node: 'n2', digest: 'd', startedAt: 3, phase: { kind: 'unready', since: 12 }, counted: 11 },
        'r-6': { model: two, node: 'n1', digest: 'd', startedAt: 4, phase: { kind: 'unready' } },
      },
    };
  };

  it('round trips (every replica phase, restart asked, counted, demand, avoid, retries); equal content gives equal entries whatever the key order', () => {
    const s = varied();
    const back = stateFromEntries(stateEntries(s));
    assert.deepEqual(back, s);
    const reordered = JSON.parse(JSON.stringify(s, (_k, v: unknown) => (v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).reverse()) : v))) as typeof s;
    assert.deepEqual([...stateEntries(reordered)].sort(), [...stateEntries(s)].sort());
    assert.deepEqual(stateFromEntries(stateEntries(emptyState)), emptyState);
  });

  it('the identity map of the record: models/<name> is the model entry, replicas/<id> the replica entry, each as canonical JSON', () => {
    const s = varied();
    const entries = stateEntries(s);
    assert.deepEqual(JSON.parse(entries.get('fleet')!), { version: STATE_VERSION, appliedRevision: s.appliedRevision });
    assert.deepEqual([...entries.keys()].filter((k) => k.startsWith('models/')).sort(), Object.keys(s.models).map((n) => `models/${keyPart(n)}`).sort());
    assert.deepEqual([...entries.keys()].filter((k) => k.startsWith('replicas/')).sort(), Object.keys(s.replicas).map((id) => `replicas/${keyPart(id)}`).sort());
    for (const [name, e] of Object.entries(s.models)) assert.equal(entries.get(`models/${keyPart(name)}`), canonicalJson(e), name);
    for (const [id, e] of Object.entries(s.replicas)) assert.equal(entries.get(`replicas/${keyPart(id)}`), canonicalJson(e), id);
    assert.deepEqual(JSON.parse(entries.get('replicas/r-3')!), { digest: 'd', model: modelName(2), node: 'n1', phase: { drain: false, kind: 'leaving', reason: 'failed', since: 8, why: 'stop' }, startedAt: 1 });
  });

  it('one model parked: one entry changes; a replica gone: its entry is deleted', () => {
    const s = bigState(1_000);
    const name = modelName(1);
    const m = s.models[name]!;
    const lastError = { code: 'REPLICA_START_FAILED', message: 'x' };
    const parked = { ...s, models: { ...s.models, [name]: { ...m, health: { ...m.health, consecutiveFailures: 5, parked: { since: 1, lastError } } } } };
    const d = diffEntries(stateEntries(s), stateEntries(parked));
    assert.deepEqual(d.puts.map(([k]) => k), [`models/${name}`]);
    assert.deepEqual(d.deletes, []);
    const replica = Object.keys(s.replicas)[0]!;
    const { [replica]: _gone, ...replicas } = s.replicas;
    const d2 = diffEntries(stateEntries(s), stateEntries({ ...s, replicas }));
    assert.deepEqual(d2, { puts: [], deletes: [`replicas/${replica}`] });
  });

  it('texts kept from an earlier record (same entry objects, the same record) are those built afresh', () => {
    const s = bigState(30);
    const [a, b, c, d] = [modelName(1), modelName(2), modelName(4), modelName(5)];
    const { demand: _demand, ...noDemand } = s.models[modelName(3)]!;
    const someReplica = Object.keys(s.replicas)[0]!;
    assert.equal(stateEntries(s), stateEntries(s));
    const table: { name: string; next: ControllerState }[] = [
      { name: 'demand changed, health kept', next: { ...s, models: { ...s.models, [a]: { ...s.models[a]!, demand: 42 } } } },
      { name: 'demand gone, health kept', next: { ...s, models: { ...s.models, [modelName(3)]: noDemand } } },
      { name: 'demand new, health kept', next: { ...s, models: { ...s.models, [b]: { ...s.models[b]!, demand: 7 } } } },
      { name: 'a start of a model', next: { ...s, replicas: { ...s.replicas, 'r-1': { model: c, node: 'n1', digest: 'd', startedAt: 5, phase: { kind: 'launching' } } } } },
      {
        name: 'a stop and an avoided node',
        next: { ...s, models: { ...s.models, [a]: { ...s.models[a]!, avoid: { n1: 13 } } }, replicas: { ...s.replicas, 'r-3': { model: d, node: 'n1', digest: 'd', startedAt: 1, phase: { kind: 'leaving', why: 'stop', since: 8, reason: 'failed', drain: false } } } },
      },
      { name: 'a replica in another phase', next: { ...s, replicas: { ...s.replicas, [someReplica]: { ...s.replicas[someReplica]!, phase: { kind: 'leaving', why: 'surge', since: 9 } } } } },
      { name: 'two models sharing one entry object', next: { ...s, models: { ...s.models, [b]: s.models[a]! } } },
      { name: 'two models sharing one health object', next: { ...s, models: { ...s.models, [b]: { health: s.models[a]!.health } } } },
    ];
    for (const t of table) {
      stateEntries(t.next);
      const fresh = structuredClone(t.next); // no object seen before: every text built afresh
      assert.deepEqual([...stateEntries(t.next)].sort(), [...stateEntries(fresh)].sort(), t.name);
      assert.deepEqual(stateFromEntries(stateEntries(t.next)), t.next, t.name);
    }
  });

  it('handled retries: a retry writes one chunk of at most RETRY_CHUNK ids, a trim deletes the oldest chunk, every value stays small', () => {
    let s: ControllerState = { ...bigState(10), handledRetries: [] };
    const id = (i: number): string => `${i.toString(16).padStart(16, '0')}:${'m'.repeat(63)}`; // a trailer's id, at a long model name
    for (let i = 0; i < MAX_HANDLED_RETRIES; i++) s = retryHandled(s, null, id(i)).state;
    const full = stateEntries(s);
    assert.ok(Math.max(...[...full.values()].map((v) => Buffer.byteLength(v))) <= 4 * 1024, 'each chunk ≤ 4 KiB');
    const next = retryHandled(s, null, id(MAX_HANDLED_RETRIES)).state;
    const d = diffEntries(full, stateEntries(next));
    assert.deepEqual(d.puts.map(([k]) => k).sort(), ['fleet', `retries/${String(MAX_HANDLED_RETRIES / RETRY_CHUNK).padStart(10, '0')}`]);
    assert.deepEqual(d.deletes, [`retries/${'0'.padStart(10, '0')}`]);
    assert.deepEqual(stateFromEntries(stateEntries(next)), next);
    // a record saved by the version before the chunks (one `retries` key) reads the same, and its next save deletes that key
    const legacy = new Map([...stateEntries(s)].filter(([k]) => !k.startsWith('retries/')));
    legacy.set('retries', JSON.stringify(s.handledRetries));
    assert.deepEqual(stateFromEntries(legacy), s);
    assert.ok(diffEntries(legacy, stateEntries(s)).deletes.includes('retries'));
  });

  it('a version-2 layout (models/<name> with health, demand, starts, stops, avoid; replicas/<id> with the five maps) reads into the version-3 record; its next save writes version 3', () => {
    const alpha = initialHealth('sha256:alpha');
    const kev = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
    const odd = { ...initialHealth('sha256:odd'), consecutiveFailures: 5, lastError: kev, lastFailureAt: 3, parked: { since: 3, lastError: kev } };
    const json = (v: unknown): string => canonicalJson(v);
    const v2 = m({
      fleet: json({ version: 2, appliedRevision: 'rev-a', retriesTrimmed: 40 }),
      [`retries/${'1'.padStart(10, '0')}`]: json(['commit:abc', 'admin:1:00ff00']),
      'models/alpha': json({
        health: alpha,
        demand: 500,
        starts: { 'a-1': { model: 'alpha', node: 'n1', digest: 'sha256:alpha', startedAt: 10 }, 'a-2': { model: 'alpha', node: 'n2', digest: 'sha256:alpha', startedAt: 11, readyAt: 20, endpoint: 'http://10.0.0.2:20000' } },
        stops: { 'a-0': { model: 'alpha', node: 'n1', reason: 'replaced', since: 30, drain: true } },
        avoid: { 'alpha@n3': 900 },
      }),
      [`models/${keyPart('team/odd@name')}`]: json({ health: odd, avoid: { 'team/odd@name@n2': 14 } }),
      'models/gone': json({ starts: { 'g-1': { model: 'gone', node: 'n1', digest: 'sha256:gone', startedAt: 5 } } }),
      'replicas/a-0': json({ restarts: 25 }),
      'replicas/a-2': json({ accounted: 22 }),
      'replicas/a-3': json({ readySince: 40, restarts: 45 }),
      'replicas/a-4': json({ unresponsiveSince: 50, accounted: 55 }),
      'replicas/a-5': json({ draining: 60 }),
    });
    const known = { model: '', node: '', digest: '', startedAt: 0 }; // facts v2 kept by id alone: filled in by the first look
    const want: ControllerState = {
      version: STATE_VERSION,
      appliedRevision: 'rev-a',
      handledRetries: ['commit:abc', 'admin:1:00ff00'],
      retriesTrimmed: 40,
      models: { alpha: { health: alpha, demand: 500, avoid: { n3: 900 } }, 'team/odd@name': { health: odd, avoid: { n2: 14 } } },
      replicas: {
        'a-0': { model: 'alpha', node: 'n1', digest: '', startedAt: 0, phase: { kind: 'leaving', why: 'stop', since: 30, reason: 'replaced', drain: true }, restartAsked: 25 },
        'a-1': { model: 'alpha', node: 'n1', digest: 'sha256:alpha', startedAt: 10, phase: { kind: 'launching' } },
        'a-2': { model: 'alpha', node: 'n2', digest: 'sha256:alpha', startedAt: 11, phase: { kind: 'ready', since: 20, seen: false, endpoint: 'http://10.0.0.2:20000' }, counted: 22 },
        'a-3': { ...known, phase: { kind: 'ready', since: 40, seen: true }, restartAsked: 45 },
        'a-4': { ...known, phase: { kind: 'unready', since: 50 }, counted: 55 },
        'a-5': { ...known, phase: { kind: 'leaving', why: 'surge', since: 60 } },
        'g-1': { model: 'gone', node: 'n1', digest: 'sha256:gone', startedAt: 5, phase: { kind: 'launching' } },
      },
    };
    const back = stateFromEntries(v2);
    assert.deepEqual(back, want);
    // the next save writes the version-3 layout over it: the v2 entries that differ are rewritten, the model entry of no model deleted
    const next = stateEntries(back);
    assert.equal(JSON.parse(next.get('fleet')!).version, STATE_VERSION);
    const d = diffEntries(v2, next);
    assert.deepEqual(d.deletes, ['models/gone']);
    assert.deepEqual(d.puts.map(([k]) => k).sort(), ['fleet', 'models/alpha', `models/${keyPart('team/odd@name')}`, 'replicas/a-0', 'replicas/a-1', 'replicas/a-2', 'replicas/a-3', 'replicas/a-4', 'replicas/a-5', 'replicas/g-1'].sort());
    assert.deepEqual(stateFromEntries(next), want);
  });

  it('entries that are not a record are refused saying which; a newer version is STATE_VERSION_NEWER', () => {
    assert.throws(() => stateFromEntries(m({ retries: '[]' })), /no fleet entry/);
    assert.throws(() => stateFromEntries(m({ fleet: '{"version":2}', 'models/a': '[1]' })), /model a is not an object/);
    assert.throws(() => stateFromEntries(m({ fleet: `{"version":${STATE_VERSION}}`, 'models/a': '[1]' })), /model a is not an object/);
    assert.throws(() => stateFromEntries(m({ fleet: `{"version":${STATE_VERSION}}`, 'replicas/r': '"x"' })), /replica r is not an object/);
    assert.throws(
      () => stateFromEntries(m({ fleet: '{"version":99}' })),
      (e: unknown) => e instanceof LlmgwError && e.code === 'STATE_VERSION_NEWER' && e.message.includes(`state version 99 is newer than this llmgw (${STATE_VERSION})`),
    );
  });
});

describe('the published snapshot as entries', () => {
  it('round trips at 5,000 models; each entry stays small (the largest well under 64 KiB)', () => {
    const p = bigPublished(5_000);
    const entries = publishedEntries(p);
    assert.equal(entries.size, 1 + 5_000 + 100);
    assert.ok(Math.max(...[...entries.values()].map((v) => v.length)) < 4 * 1024);
    const { snapshot, bad } = publishedFromEntries(entries);
    assert.deepEqual(bad, []);
    assert.deepEqual(snapshot, p);
  });

  it('an entry that is not its model (not JSON, another name) is left out and named; no fleet entry: none', () => {
    const p = bigPublished(3);
    const entries = publishedEntries(p);
    const [first, second] = [p.models[0]!.name, p.models[1]!.name];
    entries.set(`models/${first}`, '{not json');
    entries.set(`models/${second}`, JSON.stringify({ ...p.models[2], name: 'someone-else' }));
    const { snapshot, bad } = publishedFromEntries(entries);
    assert.deepEqual(snapshot?.models.map((x) => x.name), [p.models[2]!.name]);
    assert.deepEqual([...bad].sort(), [`models/${first}`, `models/${second}`].sort());
    entries.delete('fleet');
    assert.equal(publishedFromEntries(entries).snapshot, null);
    entries.set('fleet', '{"v":2}');
    assert.equal(publishedFromEntries(entries).snapshot, null, 'a format this version does not read');
  });
});
