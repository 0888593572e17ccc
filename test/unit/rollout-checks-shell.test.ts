/**
 * A rollout's checks through the whole reconciler shell, with fake nodes, a fake clock and a fake
 * check runner (the real runner against llama-server is test/integration/rollout-check*.test.ts):
 * a definition change of a serving model with rollout checks starts one replica of the new revision
 * beside the stable ones, never routes to it while its checks run, and then either replaces the
 * stable replicas surge-first (checks passed) or stops it and keeps the stable revision (held),
 * until a retry runs the checks again. Also the pure rollout life, as a table.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import type { RefreshResult } from '../../src/git/tracker.js';
import { Reconciler, type FleetSource } from '../../src/reconciler/reconciler.js';
import { checksConcluded, plannedRollout, rolloutOnDefinition, rolloutRetried, rolloutSettled, type RolloutRecord } from '../../src/reconciler/rollout-life.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { initialHealth } from '../../src/reconciler/health.js';
import type { CheckResult, RolloutCheck } from '../../src/rollout/types.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers, ticks } from '../harness/fake-node.js';
import { specOf } from '../harness/reconciler-core.js';

const ROLLOUT = ['rollout:', '  checks:', '    - name: answers', '      request: { messages: [{ role: user, content: "2+2?" }], max_tokens: 4 }', '      expect: { matches: "4" }', ''].join('\n');
const alphaYaml = (ctx: number): string => ['source: hf://org/alpha-GGUF/alpha-q4.gguf', `sha256: ${'a'.repeat(64)}`, `profile: chat${ctx}`, 'replicas: 2', 'aliases: [gpt-alpha]', 'memory: 2GiB', ROLLOUT].join('\n');
const specWith = (ctx: number): Promise<FleetSpec> => specOf((f) => {
  f['fleet.yaml'] = 'park_after_failures: 5\nplacement_reserve: 1GiB\npoll_interval: 1h\n';
  f['profiles/chat1.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 1024\nparallel: 1\n';
  f['profiles/chat2.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 2048\nparallel: 1\n';
  f['models/alpha.yaml'] = alphaYaml(ctx);
  delete f['models/beta.yaml'];
  delete f['models/gamma.yaml'];
});
const v1 = await specWith(1);
const v2 = await specWith(2);
const A1 = v1.models.alpha!.digest;
const A2 = v2.models.alpha!.digest;

class Source implements FleetSource {
  applied: { spec: FleetSpec; revision: string; warnings: []; at: Date };
  readonly rejected = null;
  readonly lastSyncOk = null;
  readonly lastSyncError = null;
  /** Every revision pushed (what the fleet repo's history holds). */
  readonly history = new Map<string, FleetSpec>();
  /** Revisions read back (SpecTracker.specAt). */
  readonly read: string[] = [];
  constructor(spec: FleetSpec) {
    this.applied = { spec, revision: 'rev1', warnings: [], at: new Date(0) };
    this.history.set('rev1', spec);
  }
  push(spec: FleetSpec, revision: string): void {
    this.applied = { spec, revision, warnings: [], at: new Date(0) };
    this.history.set(revision, spec);
  }
  async specAt(revision: string): Promise<FleetSpec> {
    await ticks(2);
    this.read.push(revision);
    const spec = this.history.get(revision);
    if (!spec) throw new Error(`no revision ${revision}`);
    return spec;
  }
  async refresh(): Promise<RefreshResult> {
    await ticks(1);
    return { outcome: 'unchanged', head: this.applied.revision, retries: [], error: null };
  }
}

interface World {
  readonly r: Reconciler;
  readonly source: Source;
  readonly nodes: Map<string, FakeNode>;
  readonly checked: string[];
  verdict: 'pass' | 'fail';
  steps(n: number): Promise<void>;
  until(what: string, done: () => boolean): Promise<void>;
  /** The alpha replicas on the nodes by digest (and the most that ever ran at once). */
  processes(): { a1: number; a2: number; max: number };
}

function world(): World {
  const clock = new FakeClock();
  const timers = new FakeTimers(clock);
  const log = new FakeFleetLog();
  const source = new Source(v1);
  const nodes = new Map(Object.keys(v1.nodes).map((n) => [n, new FakeNode(n, clock, log, new Set(), 2)]));
  let n = 0;
  let max = 0;
  const w: World = {
    source,
    nodes,
    checked: [],
    verdict: 'pass',
    r: new Reconciler({
      tracker: source,
      status: null,
      driverFor: (node) => nodes.get(node.name)!,
      stateStore: { path: 'memory', save: async () => true },
      initialState: emptyState,
      engineApiKey: 'k',
      logger: pino({ level: 'silent' }),
      clock: clock.now,
      monotonic: clock.monotonic,
      timers,
      newReplicaId: (model) => `${model}-${++n}`,
      inFlight: async () => 0,
      runChecks: async (endpoint: string, _key: string, checks: readonly RolloutCheck[]): Promise<CheckResult[]> => {
        await ticks(3);
        w.checked.push(endpoint);
        const c = checks[0]!;
        return [w.verdict === 'pass' ? { ok: true, name: c.name, ttftMs: 5, durationMs: 9 } : { ok: false, name: c.name, expected: 'text matching /4/', got: 'garbage', reason: { code: 'ROLLOUT_CHECK_FAILED', message: `check ${c.name}: expected text matching /4/, got "garbage"` } }];
      },
    }),
    async steps(k) {
      for (let i = 0; i < k; i++) {
        void w.r.requestPass('test');
        await ticks(8);
        clock.advance(1000);
        timers.fire();
        max = Math.max(max, w.processes().a1 + w.processes().a2);
      }
    },
    async until(what, done) {
      for (let i = 0; i < 400 && !done(); i++) await w.steps(1);
      assert.ok(done(), `never: ${what}: ${JSON.stringify({ processes: w.processes(), record: w.r.record(), view: w.r.model('alpha') })}`);
    },
    processes() {
      const all = [...nodes.values()].flatMap((x) => [...x.replicas.values()]).filter((x) => x.model === 'alpha');
      return { a1: all.filter((x) => x.digest === A1).length, a2: all.filter((x) => x.digest === A2).length, max };
    },
  };
  return w;
}

const routable = (r: Reconciler): string[] => r.readyReplicas('alpha').map((x) => x.digest);

describe('rollout checks through the reconciler', () => {
  it('checks pass: one new replica beside the two stable ones, not routed while checked, then the stable ones replaced surge-first', async () => {
    const w = world();
    await w.r.start();
    try {
      await w.until('two ready replicas of v1', () => routable(w.r).filter((d) => d === A1).length === 2);
      w.source.push(v2, 'rev2');
      w.verdict = 'pass';
      let sawUnderTest = false;
      await w.until('checks ran', () => {
        const p = w.processes();
        if (p.a2 === 1 && w.checked.length === 0) {
          sawUnderTest = true;
          assert.deepEqual(routable(w.r).filter((d) => d === A2), [], 'the revision under test takes no request');
          assert.equal(w.r.model('alpha')!.rollout?.phase, 'checking');
        }
        return w.checked.length > 0;
      });
      assert.ok(sawUnderTest, 'a new replica ran beside the stable ones before its checks');
      await w.until('all replicas on v2', () => w.processes().a1 === 0 && routable(w.r).filter((d) => d === A2).length === 2);
      assert.ok(w.processes().max <= 3, `at most replicas + 1 processes (saw ${w.processes().max})`);
      assert.equal(w.r.record().models.alpha!.rollout, undefined, 'a promoted rollout ends once the stable replicas are gone');
      assert.equal(w.checked.length, 1, 'the checks ran once');
    } finally {
      await w.r.stop();
    }
  });

  it('a check fails: held with its reason, the new replica stopped, the stable revision serves; a retry runs the checks again', async () => {
    const w = world();
    await w.r.start();
    try {
      await w.until('two ready replicas of v1', () => routable(w.r).filter((d) => d === A1).length === 2);
      w.source.push(v2, 'rev2');
      w.verdict = 'fail';
      await w.until('held', () => w.r.model('alpha')?.rollout?.phase === 'held');
      assert.match(w.r.model('alpha')!.rollout!.verdict!.message, /check answers: expected text matching \/4\/, got "garbage"/);
      await w.until('the new replica gone', () => w.processes().a2 === 0);
      await w.steps(10);
      assert.deepEqual(w.processes().a1, 2, 'the stable replicas keep serving');
      assert.deepEqual(routable(w.r).sort(), [A1, A1]);
      assert.equal(w.checked.length, 1);
      // held until a retry: nothing starts meanwhile
      const starts = [...w.nodes.values()].reduce((s, x) => s + [...x.replicas.values()].length, 0);
      await w.steps(10);
      assert.equal([...w.nodes.values()].reduce((s, x) => s + [...x.replicas.values()].length, 0), starts);
      w.verdict = 'pass';
      const retried = w.r.retry('alpha');
      await w.until('checks ran again', () => w.checked.length === 2);
      await retried;
      await w.until('all replicas on v2', () => w.processes().a1 === 0 && routable(w.r).filter((d) => d === A2).length === 2);
    } finally {
      await w.r.stop();
    }
  });
});

/** Two ready replicas of v1, then v2 pushed and its check failing: held, the new replica gone. */
async function held(w: World): Promise<void> {
  await w.until('two ready replicas of v1', () => routable(w.r).filter((d) => d === A1).length === 2);
  w.source.push(v2, 'rev2');
  w.verdict = 'fail';
  await w.until('held', () => w.r.model('alpha')?.rollout?.phase === 'held');
  assert.equal(w.r.record().models.alpha!.rollout!.stableRevision, 'rev1', 'the rollout names the revision that defines the stable one');
  await w.until('the new replica gone', () => w.processes().a2 === 0);
}

describe('a held rollout\'s stable revision heals', () => {
  it('a stable replica that fails while the rollout is held starts again from the stable revision\'s spec; the new one does not', async () => {
    const w = world();
    await w.r.start();
    try {
      await held(w);
      // a stable replica dies
      const [node, victim] = [...w.nodes.values()].flatMap((n) => [...n.replicas.values()].filter((x) => x.digest === A1).map((x) => [n, x] as const))[0]!;
      node.replicas.set(victim.id, { ...victim, state: 'failed' });
      await w.until('two ready stable replicas again, one of them new', () => {
        const ids = w.r.readyReplicas('alpha').filter((x) => x.digest === A1).map((x) => x.id);
        return ids.length === 2 && !ids.includes(victim.id);
      });
      assert.deepEqual(w.source.read, ['rev1'], 'the stable revision was read once');
      assert.equal(w.processes().a2, 0, 'the held revision did not start');
      assert.equal(w.r.model('alpha')!.rollout?.phase, 'held', 'still held');
      assert.deepEqual(routable(w.r).sort(), [A1, A1]);
    } finally {
      await w.r.stop();
    }
  });

  it('a restart of a stable replica while held: a fresh stable replica first, then the old one goes', async () => {
    const w = world();
    await w.r.start();
    try {
      await held(w);
      const old = w.r.readyReplicas('alpha')[0]!.id;
      void w.r.restart({ replicas: [old] });
      let fewest = 2;
      await w.until('the restarted replica replaced', () => {
        fewest = Math.min(fewest, w.r.readyReplicas('alpha').length);
        const ids = w.r.readyReplicas('alpha').map((x) => x.id);
        return ids.length === 2 && !ids.includes(old);
      });
      assert.equal(fewest, 2, 'never fewer than two ready stable replicas (surge first)');
      assert.ok(w.processes().max <= 3, `at most replicas + 1 processes (saw ${w.processes().max})`);
      assert.equal(w.processes().a2, 0);
    } finally {
      await w.r.stop();
    }
  });
});

describe('rollout life (pure)', () => {
  const ready = { a: { model: 'alpha', node: 'n', digest: 'd1', startedAt: 0, phase: { kind: 'ready' as const, since: 0, seen: true } } };
  const m = (rollout?: RolloutRecord): { health: ReturnType<typeof initialHealth>; rollout?: RolloutRecord } => ({ health: initialHealth('d1'), ...(rollout ? { rollout } : {}) });
  const checking: RolloutRecord = { digest: 'd2', stable: 'd1', phase: 'checking', since: 5 };
  const fail = { code: 'ROLLOUT_CHECK_FAILED', message: 'x' };
  const table: { name: string; got: unknown; want: unknown }[] = [
    { name: 'a definition change of a serving model with checks: checking', got: rolloutOnDefinition(m(), 'alpha', 'd2', true, ready, 5).rollout, want: checking },
    { name: 'no checks: no rollout (the surge rollout of before)', got: rolloutOnDefinition(m(), 'alpha', 'd2', false, ready, 5).rollout, want: undefined },
    { name: 'nothing serves the old revision: no rollout', got: rolloutOnDefinition(m(), 'alpha', 'd2', true, {}, 5).rollout, want: undefined },
    { name: 'a newer push during checking replaces the revision under test, same stable', got: rolloutOnDefinition(m(checking), 'alpha', 'd3', true, ready, 9).rollout, want: { digest: 'd3', stable: 'd1', phase: 'checking', since: 9 } },
    { name: 'the revision applied before the change defines the stable one', got: rolloutOnDefinition(m(), 'alpha', 'd2', true, ready, 5, 'rev1').rollout, want: { ...checking, stableRevision: 'rev1' } },
    { name: 'a newer push keeps the rollout\'s stable revision', got: rolloutOnDefinition(m({ ...checking, stableRevision: 'rev1' }), 'alpha', 'd3', true, ready, 9, 'rev2').rollout, want: { digest: 'd3', stable: 'd1', stableRevision: 'rev1', phase: 'checking', since: 9 } },
    { name: 'a push back to the stable revision ends the rollout', got: rolloutOnDefinition(m(checking), 'alpha', 'd1', true, ready, 9).rollout, want: undefined },
    { name: 'checks pass: promoted', got: checksConcluded(checking, 'd2', null, 7), want: { digest: 'd2', stable: 'd1', phase: 'promoted', since: 7 } },
    { name: 'a check fails: held with the reason', got: checksConcluded(checking, 'd2', fail, 7), want: { ...checking, phase: 'held', since: 7, verdict: fail } },
    { name: 'a result for another revision changes nothing', got: checksConcluded(checking, 'd9', fail, 7), want: checking },
    { name: 'a retry of a held rollout checks again', got: rolloutRetried({ ...checking, phase: 'held', verdict: fail }, 8), want: { digest: 'd2', stable: 'd1', phase: 'checking', since: 8 } },
    { name: 'a retry of a checking rollout changes nothing', got: rolloutRetried(checking, 8), want: checking },
    { name: 'promoted, a stable replica left: kept', got: rolloutSettled({ ...checking, phase: 'promoted' }, 'alpha', ready), want: { ...checking, phase: 'promoted' } },
    { name: 'promoted, no stable replica left: ends', got: rolloutSettled({ ...checking, phase: 'promoted' }, 'alpha', {}), want: undefined },
    { name: 'the planner: checking wants one replica of the new revision', got: plannedRollout(checking), want: { stable: 'd1', want: 1 } },
    { name: 'the planner: held wants none', got: plannedRollout({ ...checking, phase: 'held' }), want: { stable: 'd1', want: 0 } },
    { name: 'the planner: promoted is a plain definition change', got: plannedRollout({ ...checking, phase: 'promoted' }), want: null },
  ];
  for (const t of table) it(t.name, () => assert.deepEqual(t.got, t.want));
  it('the record keeps the rollout through JSON and a clock step', async () => {
    const { stateFromJson } = await import('../../src/reconciler/state-migrate.js');
    const { clockStepped } = await import('../../src/reconciler/state.js');
    const s: ControllerState = { ...emptyState, models: { alpha: m({ ...checking, stableRevision: 'rev1', phase: 'held', verdict: fail }) } };
    assert.deepEqual(stateFromJson(JSON.parse(JSON.stringify(s))), s);
    assert.equal(clockStepped(s, 100).models.alpha!.rollout!.since, 105);
  });
});

describe('a failed check\'s reason is printable and bounded', () => {
  it('what the model answered (escapes, 1 MiB) reaches the reason with no control byte and capped', async () => {
    const { checkFailure } = await import('../../src/rollout/check.js');
    const check: RolloutCheck = { name: 'answers', file: 'models/alpha.yaml', path: '/v1/chat/completions', request: {}, expect: { status: 200, matches: '4', contains: null, notMatches: null, jsonSchema: null, maxTtftMs: null }, timeoutMs: 1000 };
    const r = checkFailure(check, 'text matching /4/', `\x1b]52;c;aGk=\x07${'x'.repeat(1 << 20)}`);
    assert.equal(r.ok, false);
    const message = r.ok ? '' : r.reason.message;
    // eslint-disable-next-line no-control-regex
    assert.doesNotMatch(message, /[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
    assert.ok(Buffer.byteLength(message) <= 2048, `${Buffer.byteLength(message)} bytes`);
  });
});
