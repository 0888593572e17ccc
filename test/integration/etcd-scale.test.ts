/**
 * 5,000 models in a real etcd (issue #28): the published snapshot and the state record, one key per
 * model, past the size where one value would pass etcd's 1.5 MiB request limit. Publish, a standby's
 * view (complete, and never half of one save), a one-model change (one small txn), failover (a new
 * leader reads the record, parking intact, with one consistent read), a save left half-way by a
 * leader that died, the old single-value layout migrated, and a value past the limit cut to fit.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Published } from '../../src/ha/published-channel.js';
import { EtcdStateStore } from '../../src/ha/etcd-state.js';
import { canonicalJson } from '../../src/ha/canonical-json.js';
import { ETCD_LIMITS } from '../../src/ha/keyed-layout.js';
import { publishedEntries, type PublishedSnapshot } from '../../src/ha/published.js';
import { stateEntries } from '../../src/ha/state-layout.js';
import { startEtcd } from '../harness/etcd.js';
import { rejectsWith } from '../harness/errors.js';
import { bigPublished, bigState, isParked, modelName } from '../harness/big-fleet.js';
import { asV2, fromV2 } from '../harness/record-v2.js';
import { until } from '../harness/wait.js';
import { GiB, node, specOf } from '../harness/reconciler-core.js';
import { initialHealth } from '../../src/reconciler/health.js';
import { decide } from '../../src/reconciler/pass.js';
import { elected, etcdRevision, freshPrefix, sharedEtcd, type Instance } from '../harness/elections.js';

const MODELS = 5_000;
const ETCD_REQUEST_LIMIT = 1.5 * 1024 * 1024;

describe('5,000 models in a real etcd: per-key layout', { timeout: 180_000 }, () => {
  const { make } = sharedEtcd(startEtcd);
  const leaderOf = async (prefix: string, id: string): Promise<Instance> => {
    const i = make(prefix, id);
    i.election.start();
    await elected(i.election);
    return i;
  };
  const revision = etcdRevision;

  it('publish: every txn under the limits, a standby sees the whole snapshot (never part of a save), a one-model change is one small txn', async () => {
    const prefix = freshPrefix();
    const a = await leaderOf(prefix, 'a');
    const b = make(prefix, 'b');
    const p1 = bigPublished(MODELS);
    assert.ok(JSON.stringify(p1).length > ETCD_REQUEST_LIMIT, 'as one value it would pass etcd\'s request limit');
    const pub = new Published(a.election, a.client, prefix);
    const seen: Array<PublishedSnapshot | null> = [];
    const problems: string[] = [];
    const close = await new Published(b.election, b.client, prefix).watch((p, problem) => {
      seen.push(p);
      if (problem) problems.push(problem);
    });
    try {
      await pub.publish(p1);
      const s = pub.stats;
      assert.ok(s.txns >= 10, `${s.txns} txns`);
      assert.ok(s.largestTxnBytes <= ETCD_LIMITS.maxTxnBytes && s.largestTxnBytes < ETCD_REQUEST_LIMIT, `largest txn ${s.largestTxnBytes} bytes`);
      assert.ok(s.largestTxnOps <= 128, `largest txn ${s.largestTxnOps} ops`);
      await until('the standby sees all models', 20_000, () => seen.at(-1)?.models.length === MODELS);
      assert.deepEqual(seen.at(-1), p1);
      // nothing changed: nothing written
      const rev = await revision(a);
      await pub.publish(bigPublished(MODELS));
      assert.equal(await revision(a), rev);

      // one model changes: one txn (its entry and the head), a few hundred bytes
      const victim = p1.models.find((m) => m.phase === 'ready')!;
      const p2: PublishedSnapshot = { ...p1, models: p1.models.map((m) => (m === victim ? { ...m, phase: 'degraded', ready: 0 } : m)) };
      const before2 = pub.stats;
      await pub.publish(p2);
      assert.equal(pub.stats.txns - before2.txns, 1);
      assert.ok(pub.stats.bytes - before2.bytes <= 4 * 1024, `${pub.stats.bytes - before2.bytes} bytes for one model`);
      assert.equal(await revision(a), rev + 1);
      await until('the standby sees the change', 5_000, () => seen.at(-1)?.models.find((m) => m.name === victim.name)?.phase === 'degraded');

      // every model changes (a new revision): each view the standby gets is one save, never a mix
      const p3: PublishedSnapshot = { ...p2, appliedRevision: 'b'.repeat(40), models: p2.models.map((m) => ({ ...m, lastHandledRetry: 'commit:bbbb' })) };
      const from = seen.length;
      await pub.publish(p3);
      await until('the standby sees the new revision', 20_000, () => seen.at(-1)?.appliedRevision === 'b'.repeat(40));
      for (const v of seen.slice(from)) {
        assert.ok(v);
        const marks = new Set(v.models.map((m) => m.lastHandledRetry));
        assert.equal(marks.size, 1, 'a view held models of two saves');
        assert.equal(v.models.length, MODELS);
        assert.equal([...marks][0] === 'commit:bbbb', v.appliedRevision === 'b'.repeat(40));
      }
      assert.deepEqual(seen.at(-1), p3);
      assert.deepEqual(problems, []);
    } finally {
      await close();
    }
  });

  it('failover: the new leader reads the record with its parking whole (one consistent read); an unchanged record is not written back', async () => {
    const prefix = freshPrefix();
    const a = await leaderOf(prefix, 'a');
    const s1 = bigState(MODELS);
    assert.ok(canonicalJson(s1).length > 1_000_000);
    const store = new EtcdStateStore(a.election, a.client, prefix);
    assert.equal(await store.save(s1), true);
    assert.ok(store.stats.largestTxnBytes < ETCD_REQUEST_LIMIT && store.stats.largestTxnOps <= 128);
    const rev = await revision(a);
    assert.equal(await store.save(bigState(MODELS)), false);
    assert.equal(await revision(a), rev);

    const b = make(prefix, 'b');
    b.election.start();
    const bElected = elected(b.election);
    await a.election.stop();
    await bElected;
    const storeB = new EtcdStateStore(b.election, b.client, prefix);
    const t0 = performance.now();
    const { state, problem } = await storeB.load();
    const ms = performance.now() - t0;
    assert.equal(problem, null);
    assert.deepEqual(state, s1);
    const parked = Object.entries(state.models).filter(([, m]) => m.health.parked !== null).map(([n]) => n);
    assert.equal(parked.length, MODELS / 5);
    for (const n of parked) assert.equal(state.models[n]!.health.consecutiveFailures, 5);
    assert.ok(ms < 5_000, `failover read ${ms.toFixed(0)} ms`);
    assert.equal(await storeB.save(state), false, 'the record just loaded is not written back');
    await rejectsWith(store.save({ ...s1, appliedRevision: 'c'.repeat(40) }), 'LEADER_DEPOSED');

    // one model's health changes: one txn of a few hundred bytes
    const name = modelName(1);
    const before = storeB.stats;
    assert.equal(await storeB.save({ ...state, models: { ...state.models, [name]: { ...state.models[name]!, health: { ...state.models[name]!.health, consecutiveFailures: 1 } } } }), true);
    assert.equal(storeB.stats.txns - before.txns, 1);
    assert.ok(storeB.stats.bytes - before.bytes <= 4 * 1024, `${storeB.stats.bytes - before.bytes} bytes for one model`);
  });

  it('failover among 5,000 models: a model parked in the record loaded by the new leader gets no start; the same model not parked does', async () => {
    const spec = await specOf();
    const alpha = spec.models.alpha!;
    const lastError = { code: 'REPLICA_START_FAILED', message: 'exited with status 1' };
    const parkedAlpha = { ...initialHealth(alpha.digest), consecutiveFailures: 5, lastError, lastFailureAt: 1, parked: { since: 1, lastError } };
    const big = bigState(MODELS);
    const record = { ...big, models: { ...big.models, alpha: { health: parkedAlpha } } };
    const prefix = freshPrefix();
    const a = await leaderOf(prefix, 'a');
    await new EtcdStateStore(a.election, a.client, prefix).save(record);
    const b = make(prefix, 'b');
    b.election.start();
    const bElected = elected(b.election);
    await a.election.stop();
    await bElected;
    const { state } = await new EtcdStateStore(b.election, b.client, prefix).load();
    const startsOf = (st: typeof state): string[] =>
      decide({ state: st, spec, nodes: [node('cpu-01'), node('cpu-02')], memory: { alpha: GiB, beta: GiB, gamma: GiB }, memoryErrors: {}, running: new Set(), stopping: new Set(), now: 10, newReplicaId: (m) => `${m}-new` })
        .actions.filter((x) => x.kind === 'start')
        .map((x) => (x.kind === 'start' ? x.model : ''));
    assert.deepEqual(state.models.alpha, { health: parkedAlpha });
    assert.ok(!startsOf(state).includes('alpha'), 'the parked model was started again after the failover');
    assert.ok(startsOf({ ...state, models: { ...state.models, alpha: { health: initialHealth(alpha.digest) } } }).includes('alpha'), 'the control: not parked, it is started');
  });

  it('a save left half-way by a leader that died: the next leader reads the last complete one, and its own save completes the layout', async () => {
    const prefix = freshPrefix();
    const a = await leaderOf(prefix, 'a');
    const s1 = bigState(MODELS);
    await new EtcdStateStore(a.election, a.client, prefix).save(s1);
    // half of a save that parks every model, without its head (the leader died between txns)
    const s2 = bigState(MODELS, 1);
    const half = [...stateEntries(s2)].filter(([k]) => k.startsWith('models/')).slice(0, 1_000);
    for (let i = 0; i < half.length; i += 100) {
      await a.client.if(`${prefix}/leader`, 'Create', '>', 0).then(...half.slice(i, i + 100).map(([k, v]) => a.client.put(`${prefix}/state/${k}`).value(v))).commit();
    }
    const reader = new EtcdStateStore(a.election, a.client, prefix);
    const { state, problem } = await reader.load();
    assert.equal(problem, null);
    assert.deepEqual(state, s1, 'the last complete save, not a mix');
    assert.equal(await reader.save(s2), true);
    assert.deepEqual((await new EtcdStateStore(a.election, a.client, prefix).load()).state, s2);
  });

  it('a standby that starts watching while a first publish is half-way sees the whole snapshot once its head lands (the entries before its read count too)', async () => {
    const prefix = freshPrefix();
    const a = await leaderOf(prefix, 'a');
    const p1 = bigPublished(1_000);
    const entries = [...publishedEntries(p1)];
    // the first 300 entries of a publish whose leader died before the rest
    for (let i = 0; i < 300; i += 100) {
      await a.client.if(`${prefix}/leader`, 'Create', '>', 0).then(...entries.slice(i, i + 100).map(([k, v]) => a.client.put(`${prefix}/published/${k}`).value(v))).commit();
    }
    const b = make(prefix, 'b');
    const seen: Array<PublishedSnapshot | null> = [];
    const close = await new Published(b.election, b.client, prefix).watch((p) => seen.push(p));
    try {
      assert.ok(seen.length > 0 && seen.every((v) => v === null), 'no whole save yet');
      const pub = new Published(a.election, a.client, prefix);
      await pub.publish(p1);
      assert.ok(pub.stats.bytes < entries.slice(300).reduce((n, [k, v]) => n + k.length + v.length + 64, 0), 'the entries already there were not written again');
      await until('the standby sees the snapshot', 5_000, () => seen.at(-1) != null);
      assert.deepEqual(seen.at(-1), p1);
    } finally {
      await close();
    }
  });

  it('migration: the old single-value record and snapshot are read, written as keys and deleted; a standby reads the old snapshot until then', async () => {
    const prefix = freshPrefix();
    const seed = make(prefix, 'seed');
    // the single value was written by the version before the entity record (version 2): it is migrated too
    const v2 = asV2(bigState(4_000));
    const legacyState = canonicalJson({ version: 2, ...v2 });
    const s1 = fromV2(v2);
    assert.ok(legacyState.length < ETCD_REQUEST_LIMIT);
    const p1 = bigPublished(2_000);
    await seed.client.put(`${prefix}/state`).value(legacyState);
    await seed.client.put(`${prefix}/snapshot`).value(JSON.stringify(p1));

    const standby = make(prefix, 'standby');
    const seen: Array<PublishedSnapshot | null> = [];
    const close = await new Published(standby.election, standby.client, prefix).watch((p) => seen.push(p));
    try {
      assert.deepEqual(seen.at(-1), p1, 'a new standby reads the snapshot of a leader of the old version');
      const a = await leaderOf(prefix, 'a');
      const store = new EtcdStateStore(a.election, a.client, prefix);
      const { state, problem } = await store.load();
      assert.equal(problem, null);
      assert.deepEqual(state, s1);
      assert.equal(await a.client.get(`${prefix}/state`).string(), null, 'the old record deleted');
      assert.deepEqual((await new EtcdStateStore(a.election, a.client, prefix).load()).state, s1, 'parking and replicas kept');
      assert.equal(Object.values(state.models).filter((m) => m.health.parked).length, 800);
      assert.equal(await store.save(s1), false);

      const p2: PublishedSnapshot = { ...p1, appliedRevision: 'd'.repeat(40) };
      await new Published(a.election, a.client, prefix).publish(p2);
      assert.equal(await a.client.get(`${prefix}/snapshot`).string(), null, 'the old snapshot deleted');
      await until('the standby follows the per-key snapshot', 5_000, () => seen.at(-1)?.appliedRevision === 'd'.repeat(40));
      assert.deepEqual(seen.at(-1), p2);
    } finally {
      await close();
    }
  });

  it('a value past the limit is cut to fit with a note (ETCD_VALUE_TRUNCATED), never refused: the rest of the publish and of the save is written', async () => {
    const prefix = freshPrefix();
    const a = await leaderOf(prefix, 'a');
    const pub = new Published(a.election, a.client, prefix);
    const cuts: string[] = [];
    pub.onCut = (r) => cuts.push(`${r.code} ${r.message}`);
    const p1 = bigPublished(500);
    await pub.publish(p1);
    // a reason written before reasons were capped where they are made (or a record that big anyway)
    const huge = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: `unknown model architecture: '${'x'.repeat(ETCD_LIMITS.maxValueBytes + 1)}'` };
    const bad: PublishedSnapshot = { ...p1, appliedRevision: 'e'.repeat(40), models: p1.models.map((m, i) => (i === 7 ? { ...m, lastError: huge } : i === 8 ? { ...m, desired: m.desired + 1 } : m)) };
    await pub.publish(bad);
    assert.equal(pub.lastError, null);
    assert.equal(cuts.length, 1);
    assert.match(cuts[0]!, new RegExp(`^ETCD_VALUE_TRUNCATED .*${prefix}/published/models/${p1.models[7]!.name} \\(\\d+ bytes cut to \\d+\\)`));
    const stored = await a.client.get(`${prefix}/published/models/${p1.models[7]!.name}`).string();
    assert.ok(stored !== null && Buffer.byteLength(stored) <= ETCD_LIMITS.maxValueBytes, `${stored?.length} bytes`);
    const seen = await new Promise<PublishedSnapshot | null>((resolve) => {
      void new Published(a.election, a.client, prefix).watch((p) => resolve(p)).then((close) => close());
    });
    assert.equal(seen?.appliedRevision, 'e'.repeat(40), 'the rest of the publish was written');
    assert.equal(seen?.models[8]!.desired, p1.models[8]!.desired + 1);
    assert.match(seen?.models[7]!.lastError?.message ?? '', /^unknown model architecture: 'x+… \(\d+ bytes cut\)$/);

    const store = new EtcdStateStore(a.election, a.client, prefix);
    store.onCut = (r) => cuts.push(`${r.code} ${r.message}`);
    const s = bigState(10);
    const name = Object.keys(s.models).find((_, i) => isParked(i, 5))!;
    const h = s.models[name]!.health;
    const saved = { ...s, models: { ...s.models, [name]: { ...s.models[name]!, health: { ...h, lastError: huge, parked: { since: h.parked?.since ?? 1, lastError: huge } } } } };
    assert.equal(await store.save(saved), true);
    assert.equal(cuts.length, 2);
    const loaded = (await new EtcdStateStore(a.election, a.client, prefix).load()).state;
    assert.equal(Object.keys(loaded.models).length, Object.keys(s.models).length, 'every model saved');
    assert.ok(loaded.models[name]!.health.parked, 'the model with the huge reason is parked in etcd');
    assert.match(loaded.models[name]!.health.parked!.lastError.message, /bytes cut\)$/);
    assert.equal(await store.save(saved), false, 'the same cut is not written again');
  });
});
