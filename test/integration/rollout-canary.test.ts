/**
 * A canary judged side by side (#34), on the real stack: an sshd node, real llama-server replicas of
 * a tiny model, the fleet repo behind git http-backend, the router in front of the controller (the
 * router's figures handed to the controller, as serve does), and the official `openai` client.
 *
 * - a good change with a check and two steps: the check passes, each step passes on both arms' figures, the revision is promoted
 *   after steps × interval (± a pass), nothing fails, and at most replicas + 1 llama-servers run;
 * - an error regression (the new profile's context is too small for a third of the prompts): rolled
 *   back on the error rates of both arms, within the step; the clients' failures are only the
 *   canary's; the stable revision serves, and stays so across a restart of the controller; its
 *   replica, killed, starts again from the stable revision's spec read back from git;
 * - a latency regression (the same name on a model 8× as deep): rolled back on TTFT or TPOT, both figures named;
 * - too little traffic: the step holds as inconclusive, saying how many requests it saw, until
 *   `ctl rollout promote` promotes it.
 */
import { strict as assert } from 'node:assert';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildRouter } from '../../src/router/app.js';
import { RouterRollouts } from '../../src/router/rollout-figures.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { killReplicasUnder, modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { sampleProcesses } from '../harness/stream-load.js';

let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;
let client: OpenAI;
let chat: TinyModelFile;
let figures: RouterRollouts;

const INTERVAL_S = 8;
const canary = (o: { minRequests?: number; latency?: boolean; intervalS?: number } = {}): string[] => [
  'rollout:',
  '  checks:',
  '    - name: answers',
  '      request: { messages: [{ role: user, content: "What is 2+2?" }], max_tokens: 4 }',
  '      expect: { status: 200, matches: "." }',
  '  canary:',
  '    steps: [30%, 60%]',
  `    interval: ${o.intervalS ?? INTERVAL_S}s`,
  `    min_requests: ${o.minRequests ?? 5}`,
  '    max_error_rate_increase: 5%',
  // a tiny model's latency on a shared 2-core machine moves by more than 1.5× from run to run: these
  // tests judge the error rate; the latency comparisons have their table tests (canary-steps, verdict)
  `    max_ttft_ratio: ${o.latency ? 1.5 : 20}`,
  `    max_tpot_ratio: ${o.latency ? 1.5 : 20}`,
  '    on_inconclusive: hold',
];

function files(o: { ctx: number; cacheRam: string; minRequests?: number; latency?: boolean; intervalS?: number; model?: TinyModelFile }): Record<string, string | null> {
  const f: Record<string, string | null> = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['profiles/chat.yaml'] = ['engine: llama-cpp@test', `ctx_size: ${o.ctx}`, 'threads: 1', 'parallel: 2', 'memory_overhead: 64MiB', `cache_ram: ${o.cacheRam}`, 'start_timeout: 60s', ''].join('\n');
  f['models/chat.yaml'] = modelYaml(o.model ?? chat, ['replicas: 1', ...canary(o)]).replace('profile: tiny', 'profile: chat');
  return f;
}

const view = () => ctl.reconciler.model('chat')!;
const LONG = 'the fleet runs tiny models on many nodes. '.repeat(12);

/**
 * Requests until stopped: `workers` at once, each a new conversation (its own draw), one in three with
 * a prompt of a few hundred tokens. Every outcome counted, failures by prompt length.
 */
function load(workers: number, pauseMs = 0): { stop: () => Promise<{ ok: number; failed: number; failedLong: number; failedShort: number; errors: string[] }> } {
  const t = { ok: 0, failed: 0, failedLong: 0, failedShort: 0, errors: [] as string[] };
  let running = true;
  let n = 0;
  const worker = async (): Promise<void> => {
    while (running) {
      const i = n++;
      const long = i % 3 === 0;
      try {
        await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: `conversation ${i}: ${long ? LONG : 'hello'}` }], max_tokens: 6 });
        t.ok++;
      } catch (e) {
        t.failed++;
        if (long) t.failedLong++;
        else t.failedShort++;
        if (t.errors.length < 5) t.errors.push((e as Error).message);
      }
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs)); // deliberate: the load's pacing
    }
  };
  const all = Array.from({ length: workers }, () => worker());
  return {
    stop: async () => {
      running = false;
      await Promise.all(all);
      return t;
    },
  };
}

async function startRouter(c: TestController): Promise<void> {
  router = buildRouter({ fleet: c.reconciler, auth: { required: false }, rollouts: figures });
  await router.listen({ port: 0, host: '127.0.0.1' });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${(router.server.address() as AddressInfo).port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
}

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 5, embeddingLength: 256, layers: 4, tensorType: 'f16' });
  await fleet.push(files({ ctx: 2048, cacheRam: '16MiB' }), 'chat, with a canary');
  figures = new RouterRollouts();
  ctl = await fleet.startController({ rolloutFigures: figures });
  await startRouter(ctl);
  await ctl.until('chat ready (a first deploy has no stable revision: no rollout)', 120_000, () => view().ready === 1 && view().rollout === undefined);
});

after(async () => {
  await router?.close();
  await fleet?.cleanup();
});

describe('a canary judged against the stable revision (real llama-server, sshd, git, the openai client)', { timeout: 10 * 60_000 }, () => {
  it('a good change: both steps pass on both arms\' figures, promoted after steps × interval, nothing fails, at most replicas + 1 processes', async () => {
    const procs = sampleProcesses(fleet.nodes.map((n) => n.dataDir));
    const l = load(3);
    await fleet.push(files({ ctx: 2048, cacheRam: '17MiB' }), 'chat: a good change');
    const next = (): string => view().spec.digest;
    const seen: { step: number; since: number; canaryRequests: number }[] = [];
    const off = ctl.reconciler.onSnapshot((s) => {
      const r = s.models.find((m) => m.name === 'chat')?.rollout;
      if (r?.phase === 'canary' && r.figures) seen.push({ step: r.step, since: r.since, canaryRequests: r.figures.canary.requests });
    });
    await ctl.until('in the canary', 120_000, () => view().rollout?.phase === 'canary');
    await ctl.until('promoted and settled on the new revision', 180_000, () => view().rollout === undefined && view().ready === 1 && view().replicas.every((x) => x.digest === next() && x.phase === 'ready'));
    // when the first step began, from the controller's log (a look at the view may come a step late on a loaded machine)
    const began = ctl.logs.find((x) => x.msg === 'rollout: checks passed; the canary takes its first step')!.time as number;
    off();
    const t = await l.stop();
    const promotedAt = ctl.logs.find((x) => x.msg === 'rollout: the canary passed its last step; the new revision is promoted')!;
    assert.ok(promotedAt, 'the promotion is logged');
    const tookS = ((promotedAt.time as number) - began) / 1000;
    // two steps of INTERVAL_S each; a pass comes at each quarter of a step, and the end of one may wait for a pass in flight
    assert.ok(tookS >= 2 * INTERVAL_S && tookS <= 2 * INTERVAL_S + 10, `promoted ${tookS} s after the first step began (2 × ${INTERVAL_S} s)`);
    assert.ok(ctl.logs.some((x) => x.msg === 'rollout: checks passed; the canary takes its first step' && x.digest === next()), 'its checks passed first');
    assert.ok(ctl.logs.some((x) => x.msg === 'rollout: the canary passed at 30%; next step 60%'), 'the first step passed on its figures');
    assert.ok(seen.some((x) => x.step === 0 && x.canaryRequests > 0) && seen.some((x) => x.step === 1 && x.canaryRequests > 0), `both steps saw canary requests: ${JSON.stringify(seen.slice(-3))}`);
    assert.equal(t.failed, 0, `nothing failed: ${t.errors.join(' | ')}`);
    assert.ok(t.ok > 50, `${t.ok} requests answered`);
    assert.ok(procs.stop() <= 2, 'at most replicas + 1 llama-servers at once');
    console.log(`rollout-canary: good change promoted ${tookS} s after its first step began; ${t.ok} requests, 0 failed; last figures ${JSON.stringify(seen.at(-1))}`);
  });

  it('an error regression (a context too small for a third of the prompts) is rolled back on both arms\' error rates; the stable revision serves, across a restart too', async () => {
    const stable = view().spec.digest;
    const l = load(3);
    await fleet.push(files({ ctx: 256, cacheRam: '17MiB' }), 'chat: a context too small for the long prompts');
    await ctl.until('rolled back', 120_000, () => view().rollout?.phase === 'rolled_back');
    const r = view().rollout!;
    assert.equal(r.verdict?.code, 'ROLLOUT_ROLLED_BACK');
    assert.match(r.verdict!.message, /^canary rolled back at 30%: error rate \d+% vs 0% on the stable revision over \d+ \/ \d+ requests/);
    // rolled back within the step it failed in (a failure does not wait for the interval's end)
    const rolled = ctl.logs.find((x) => x.msg === 'rollout rolled back: the stable revision serves')!;
    const stepBegan = ctl.logs.find((x) => x.msg === 'rollout: checks passed; the canary takes its first step' && (x.time as number) > 0 && (x.digest as string) === r.canaryDigest);
    assert.ok(stepBegan, 'the canary step began');
    assert.ok((rolled.time as number) - (stepBegan.time as number) <= INTERVAL_S * 1000 + 5000, 'rolled back within the step');
    await ctl.until('the canary drained and stopped', 60_000, () => view().replicas.every((x) => x.digest === stable) && view().ready === 1);
    const t = await l.stop();
    const m = /over (\d+) \/ (\d+) requests/.exec(r.verdict!.message)!;
    assert.equal(t.failedShort, 0, `only the canary's long prompts failed: ${t.errors.join(' | ')}`);
    assert.ok(t.failed <= Number(m[1]), `clients saw ${t.failed} failures, no more than the canary's ${m[1]} requests in the window`);
    assert.ok(t.failed > 0, 'the regression was real');
    console.log(`rollout-canary: ${r.verdict!.message} — ${(((rolled.time as number) - (stepBegan.time as number)) / 1000).toFixed(1)} s into the step; clients saw ${t.failed} failures of ${t.ok + t.failed}`);

    // across a restart of the controller: still rolled back, still on the stable revision
    await router.close();
    await ctl.stop();
    figures = new RouterRollouts();
    ctl = await fleet.startController({ rolloutFigures: figures });
    await startRouter(ctl);
    await ctl.until('the restarted controller looked', 60_000, () => ctl.reconciler.snapshot().lastPass !== null && view().ready === 1);
    assert.equal(view().rollout?.phase, 'rolled_back');
    assert.ok(view().replicas.every((x) => x.digest === stable), 'the stable revision serves');
    const after = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: `after the restart: ${LONG}` }], max_tokens: 4 });
    assert.ok(after.choices.length === 1, 'a long prompt is answered by the stable revision');

    // the stable replica dies while rolled back: it starts again from the stable revision's spec, read back from git
    const was = view().replicas[0]!.id;
    killReplicasUnder(fleet.nodes[0]!.dataDir);
    await ctl.until('a new stable replica ready', 120_000, () => view().ready === 1 && view().replicas.some((x) => x.id !== was && x.digest === stable && x.phase === 'ready'));
    assert.equal(view().rollout?.phase, 'rolled_back', 'still rolled back');
    assert.ok(view().replicas.every((x) => x.digest === stable), 'no replica of the rolled-back revision started');
    assert.ok(ctl.logs.some((x) => x.msg === 'rollout: the stable revision\'s spec is read; its replicas can start again'), 'the stable revision was read from the fleet repo');
    const healed = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: `after the crash: ${LONG}` }], max_tokens: 4 });
    assert.ok(healed.choices.length === 1, 'a long prompt is answered by the stable revision started again');
  });

  it('a latency regression (a model with 8× the layers behind the same name) is rolled back on the TPOT or TTFT ratio, both figures in the reason', async () => {
    const slow = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat-deep.gguf'), { seed: 5, embeddingLength: 256, layers: 32, tensorType: 'f16' });
    // the revision that serves: the stable one of the rollout the test before rolled back
    const stable = view().rollout?.stableDigest ?? view().spec.digest;
    const pushedFrom = view().spec.digest;
    // a latency p95 is compared on 20+ samples of a bucket on each arm (verdict.ts): a step long enough for the slow canary's
    const l = load(4);
    await fleet.push(files({ ctx: 2048, cacheRam: '16MiB', latency: true, intervalS: 40, minRequests: 20, model: slow }), 'chat: the same name on a model 8× as deep');
    // (the revision of the test before is rolled back too: wait for this one's verdict)
    const promoted = (): boolean => view().spec.digest !== pushedFrom && view().rollout === undefined && view().replicas.every((x) => x.digest === view().spec.digest);
    await ctl
      .until('rolled back (or promoted)', 120_000, () => promoted() || (view().spec.digest !== pushedFrom && view().rollout?.canaryDigest === view().spec.digest && view().rollout?.phase === 'rolled_back' && view().rollout?.stableDigest === stable))
      .catch((e: unknown) => {
        throw new Error(`${(e as Error).message}\nlast logs: ${JSON.stringify(ctl.logs.filter((x) => (x.level as number) >= 30).slice(-12))}`);
      });
    const t = await l.stop();
    const rolloutLogs = (): string => JSON.stringify(ctl.logs.filter((x) => typeof x.msg === 'string' && x.msg.startsWith('rollout')).slice(-4).map((x) => ({ msg: x.msg, figures: x.figures, reason: x.reason })));
    assert.ok(!promoted(), `the slower revision was promoted: ${rolloutLogs()}`);
    const r = view().rollout!;
    assert.match(r.verdict!.message, /^canary rolled back at 30%: (time per output token|TTFT) p95 [\d.]+× the stable revision's \([\d.]+ vs [\d.]+ ms/);
    assert.equal(t.failed, 0, `a slow revision fails no request: ${t.errors.join(' | ')}`);
    await ctl.until('the canary drained and stopped', 60_000, () => view().replicas.every((x) => x.digest === stable) && view().ready === 1);
    console.log(`rollout-canary: ${r.verdict!.message}`);
  });

  it('too little traffic: the step holds as inconclusive, saying how many requests it saw; `ctl rollout promote` promotes it', async () => {
    const l = load(1, 1500);
    const before = view().spec.digest;
    await fleet.push(files({ ctx: 2048, cacheRam: '18MiB', minRequests: 200 }), 'chat: a change the traffic cannot judge');
    await ctl.until('held', 120_000, () => view().spec.digest !== before && view().rollout?.canaryDigest === view().spec.digest && view().rollout?.phase === 'held');
    await l.stop();
    const r = view().rollout!;
    assert.match(r.verdict!.message, /^held at 30%: \d+ of 200 requests on the canary \(stable: \d+ of 200\)/);
    assert.equal(r.verdict!.code, 'ROLLOUT_HELD');
    await ctl.until('the held revision drained', 60_000, () => view().replicas.every((x) => x.digest === r.stableDigest) && view().ready === 1);
    // an operator decides: `ctl rollout promote` (the admin call) promotes it, and it replaces the stable revision
    const o = await ctl.reconciler.overrideRollout('chat', 'promote', 'the test');
    assert.equal(o.outcome, 'promoted');
    await ctl.until('promoted and settled', 120_000, () => view().rollout === undefined && view().ready === 1 && view().replicas.every((x) => x.digest === view().spec.digest && x.phase === 'ready'));
  });
});
