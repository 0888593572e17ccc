/**
 * Every router's canary figures for the HA leader (#34, src/ha/rollout-figures.ts) on a real etcd:
 * three instances' routers (RouterRollouts) publish their windows on leases; the leading one's
 * RolloutFigures adds up its own window and the others' of the same revision and `since`; a
 * malformed value put in etcd is skipped with a warning; a router that stops (its key gone with its
 * lease) keeps counting for the step being judged; a new step (a restart on the leader) counts only
 * routers that recorded under it; a standby reads nothing and answers with its own window.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { RolloutBoard, type RolloutBoardLog } from '../../src/ha/rollout-figures.js';
import type { ArmSample, RolloutView } from '../../src/rollout/types.js';
import { RouterRollouts } from '../../src/router/rollout-figures.js';
import { freshPrefix, sharedEtcd } from '../harness/elections.js';
import { startEtcd } from '../harness/etcd.js';
import { realTime } from '../harness/real-time.js';
import { until } from '../harness/wait.js';

const DIGEST = 'sha256:canary';
const view = (since: number): RolloutView => ({ phase: 'canary', stableDigest: 'sha256:stable', canaryDigest: DIGEST, step: 0, share: 0.5, since, until: since + 20_000, verdict: null });
const ok = (arm: 'stable' | 'canary'): ArmSample => ({ arm, outcome: 'ok', ttftMs: 30, tpotMs: 4, promptTokens: 12, cachedTokens: 0 });
const err = (arm: 'stable' | 'canary'): ArmSample => ({ arm, outcome: 'error', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null });

function record(r: RouterRollouts, since: number, samples: readonly ArmSample[]): void {
  for (const s of samples) r.record('chat', view(since), s, since + 1);
}

class Log implements RolloutBoardLog {
  readonly warnings: { obj: Record<string, unknown>; msg: string }[] = [];
  warn(obj: object, msg: string): void {
    this.warnings.push({ obj: obj as Record<string, unknown>, msg });
  }
  debug(): void {}
}

describe('rollout figures of every router on a real etcd', { timeout: 60_000 }, () => {
  const shared = sharedEtcd(startEtcd);

  it('the leader adds up the step\'s windows of every router, skips a malformed one, keeps a stopped router\'s, and counts only the current step', async () => {
    const prefix = freshPrefix();
    const locals = { a: new RouterRollouts(), b: new RouterRollouts(), c: new RouterRollouts() };
    const log = new Log();
    const boards = Object.fromEntries(
      Object.entries(locals).map(([id, local]) => [id, new RolloutBoard({ client: shared.make(prefix, id).client, prefix, id, ttlSeconds: 3, refreshMs: 200, time: realTime, local, log })]),
    ) as Record<'a' | 'b' | 'c', RolloutBoard>;
    const raw = shared.make(prefix, 'raw').client;
    const leader = boards.a.figures();
    const counts = (): { canary: number; stable: number; errors: number } | null => {
      const w = leader.window('chat', DIGEST);
      return w && { canary: w.canary.requests, stable: w.stable.requests, errors: w.canary.errors };
    };
    try {
      const s1 = Date.now();
      leader.restart('chat', DIGEST, s1); // the controller begins the step on the leader
      record(locals.a, s1, [ok('canary')]);
      record(locals.b, s1, [ok('canary'), ok('canary'), ok('stable'), ok('stable'), ok('stable')]);
      record(locals.c, s1, [ok('canary'), err('canary'), ok('stable')]);
      boards.a.setLeading(true);
      for (const b of Object.values(boards)) b.start();
      await until('the leader counting all three routers', 10_000, () => counts()?.canary === 5 && counts()?.stable === 4, { diag: () => JSON.stringify({ counts: counts(), warnings: log.warnings.map((w) => [w.msg, String(w.obj.err ?? w.obj.problem)]) }) });
      assert.deepEqual(counts(), { canary: 5, stable: 4, errors: 1 }, 'a 1 + b 2 + c 2 (one an error) on the canary, b 3 + c 1 on stable');
      assert.deepEqual(Object.keys(await raw.getAll().prefix(`${prefix}/rollout-windows/`).strings()).sort(), ['a', 'b', 'c'].map((id) => `${prefix}/rollout-windows/${id}`));
      // a standby reads nothing: its figures are its own router's
      assert.equal(boards.b.figures().window('chat', DIGEST)!.canary.requests, 2);

      // more requests on b: published when they change, read at the next refresh
      record(locals.b, s1, [ok('canary'), ok('canary')]);
      await until('b\'s two more', 10_000, () => counts()?.canary === 7);

      // a malformed value under the prefix: a warning, once; not counted
      await raw.put(`${prefix}/rollout-windows/x`).value(JSON.stringify({ v: 1, bounds: 1, models: {} }));
      await raw.put(`${prefix}/rollout-windows/y`).value('{"v":1,"bounds":');
      await until('both warned about', 10_000, () => log.warnings.filter((w) => w.msg.includes('malformed')).length === 2);
      await boards.a.refresh();
      await boards.a.refresh();
      const malformed = log.warnings.filter((w) => w.msg.includes('malformed'));
      assert.equal(malformed.length, 2, 'once per value, not once per read');
      assert.deepEqual(malformed.map((w) => w.obj.key).sort(), [`${prefix}/rollout-windows/x`, `${prefix}/rollout-windows/y`]);
      assert.match(String(malformed.find((w) => w.obj.key === `${prefix}/rollout-windows/x`)!.obj.problem), /bounds/);
      assert.deepEqual(counts(), { canary: 7, stable: 4, errors: 1 });

      // c stops: its key goes with its lease, and its window of this step still counts (what it saw happened)
      await boards.c.stop();
      await until('c\'s key gone', 10_000, async () => !(`${prefix}/rollout-windows/c` in (await raw.getAll().prefix(`${prefix}/rollout-windows/`).strings())));
      await boards.a.refresh();
      assert.deepEqual(counts(), { canary: 7, stable: 4, errors: 1 }, 'c\'s requests and its error are kept for the step');

      // the next step: the leader's window begins again; b's window of the last step does not count
      // until b's router records under the view's new since (RouterRollouts.record begins afresh)
      const s2 = s1 + 20_000;
      leader.restart('chat', DIGEST, s2);
      await boards.a.refresh();
      assert.deepEqual(counts(), { canary: 0, stable: 0, errors: 0 }, 'nothing of the last step');
      record(locals.b, s2, [ok('canary'), ok('stable')]);
      await until('b\'s window of the new step counted', 10_000, () => counts()?.canary === 1 && counts()?.stable === 1);

      // a leader no longer: it reads nothing, its figures are its own router's
      boards.a.setLeading(false);
      assert.deepEqual(counts(), { canary: 0, stable: 0, errors: 0 });
    } finally {
      await Promise.all(Object.values(boards).map((b) => b.stop()));
    }
    await raw.delete().key(`${prefix}/rollout-windows/x`).exec();
    await raw.delete().key(`${prefix}/rollout-windows/y`).exec();
    assert.deepEqual(await raw.getAll().prefix(`${prefix}/rollout-windows/`).keys(), [], 'stopped boards leave no key');
  });
});
