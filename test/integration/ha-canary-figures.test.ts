/**
 * A canary step under HA is judged on every router's figures (#34): three real `llmgw serve` on one
 * real etcd, an sshd node running real llama-server replicas of a tiny model, the fleet repo behind
 * git http-backend, and the official `openai` client (maxRetries: 0) streaming through a STANDBY's
 * router only — the leader's own router sees none of the model's requests.
 *
 * 1. A definition change (cache_ram 16 → 17 MiB: threads 1 → 2 is 60× slower per token on a shared
 *    2-core machine, a real regression there) with a one-step canary (50% for 20 s, min_requests 10,
 *    on_inconclusive: hold): the leader shows both arms' figures from the standby's router, the step
 *    passes at the end of its interval and the revision is promoted; nothing failed or was cut. Alone
 *    the leader would have seen 0 requests on each arm and held the step as inconclusive.
 * 2. The acceptance "the leader is SIGKILLed mid-step": a second change with two steps (30%, 60%),
 *    traffic through both standbys, the leader killed in the middle of the second step, and the new
 *    leader's own router given no more traffic from then on. The new leader resumes the same step,
 *    its window begins again (a later since, figures from then on), it counts the other standby's
 *    figures, and the verdict is the same as without the kill: promoted, no earlier than a whole
 *    interval after the window began again.
 */
import { strict as assert } from 'node:assert';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import type { ModelJson } from '../../src/wire/shape.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { agreedLeader, logLines, procsDiag, spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { GiveUp, until } from '../harness/wait.js';

const LEASE_S = 4;
/** Short streams (a few tokens each) so each arm sees dozens of requests in a step even on a loaded machine. */
const LOAD_WORKERS = 4;
const INTERVAL_S = 20;
const MIN_REQUESTS = 10;
const WEBHOOK_SECRET = 'ha-canary-figures-webhook-secret';
const PROMOTED = 'rollout: the canary passed its last step; the new revision is promoted';
const BEGUN_AGAIN = "rollout: the canary step's window begins again (its figures were not kept across a restart or a change of leader)";

let etcd: EtcdInstance;
let fleet: TestFleet;
let chat: TinyModelFile;
let procs: ServeProc[] = [];
let leader: { proc: ServeProc; epoch: number };

const diag = (): string => procsDiag(procs, 4000);
const standbys = (): ServeProc[] => procs.filter((p) => p !== leader.proc && p.alive());
const clientOf = (p: ServeProc): OpenAI => new OpenAI({ baseURL: `http://127.0.0.1:${p.routerPort}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });

/** The chat model with `cacheRam` (a change of it is a new revision that serves as fast as the old), and a canary of `steps` (the rollout block is not in the digest). */
function files(o: { cacheRam: string; steps: string }): Record<string, string | null> {
  const f: Record<string, string | null> = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['fleet.yaml'] = ['poll_interval: 1h', 'placement_reserve: 256MiB', 'stop_grace: 10s', 'drain_grace: 120s', ''].join('\n');
  f['profiles/chat.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 2048', 'threads: 1', 'parallel: 4', 'memory_overhead: 64MiB', `cache_ram: ${o.cacheRam}`, 'start_timeout: 60s', ''].join('\n');
  // the ratios are wide: this test is about whose figures the leader judges on, not latency noise on a shared machine
  const rollout = ['rollout:', '  canary:', `    steps: ${o.steps}`, `    interval: ${INTERVAL_S}s`, `    min_requests: ${MIN_REQUESTS}`, '    max_ttft_ratio: 50', '    max_tpot_ratio: 50', '    on_inconclusive: hold'];
  f['models/chat.yaml'] = modelYaml(chat, ['replicas: 1', ...rollout]).replace('profile: tiny', 'profile: chat');
  return f;
}

async function chatModel(p: ServeProc): Promise<ModelJson | undefined> {
  return (await p.admin<{ models: ModelJson[] }>('/models')).models.find((m) => m.name === 'chat');
}

/** The chat model's rollout on `p`'s view; a rollout held or rolled back ends the wait. */
async function liveRollout(p: ServeProc): Promise<ModelJson['rollout']> {
  const r = (await chatModel(p))?.rollout;
  if (r?.phase === 'held' || r?.phase === 'rolled_back') throw new GiveUp(`the rollout is ${r.phase}: ${r.verdict?.message ?? ''}`);
  return r;
}

/** One ready replica on the definition in force, no rollout: settled. A rollout held or rolled back ends the wait. */
async function settled(p: ServeProc, notDigest?: string): Promise<ModelJson | null> {
  const m = await chatModel(p);
  if (m?.rollout?.phase === 'held' || m?.rollout?.phase === 'rolled_back') throw new GiveUp(`the rollout is ${m.rollout.phase}: ${m.rollout.verdict?.message ?? ''}`);
  if (!m || m.digest === notDigest || m.rollout !== undefined || m.replicas.length !== 1) return null;
  return m.replicas.every((r) => r.phase === 'ready' && r.digest === m.digest) ? m : null;
}

/** A git server's push webhook to an instance's admin port (a standby forwards the pass to the leader). */
async function pushWebhook(p: ServeProc): Promise<void> {
  const r = await fetch(`http://127.0.0.1:${p.adminPort}/admin/v1/webhook`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': WEBHOOK_SECRET },
    body: JSON.stringify({ ref: 'refs/heads/main' }),
  });
  assert.equal(r.status, 202, await r.text());
}

/** The model's requests a router counted (its own /metrics, llmgw_router_requests_total). */
async function routedRequests(p: ServeProc): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${p.adminPort}/metrics`)).text();
  let n = 0;
  for (const line of text.split('\n')) if (line.startsWith('llmgw_router_requests_total{') && line.includes('model="chat"')) n += Number(line.slice(line.lastIndexOf(' ') + 1));
  return n;
}

interface Tally {
  sent: number;
  ok: number;
  errors: string[];
}

/** `workers` streaming short chat completions, each a new conversation (its own prefix: the arms split by it). */
function shortLoad(client: OpenAI, workers = LOAD_WORKERS): { tally: Tally; stop: () => Promise<Tally> } {
  const tally: Tally = { sent: 0, ok: 0, errors: [] };
  let running = true;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; running; i++) {
      tally.sent++;
      let finished = false;
      try {
        const stream = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: `worker ${w} question ${i}: name a fleet` }], stream: true, max_tokens: 6 });
        for await (const c of stream) if (c.choices[0]?.finish_reason) finished = true;
        if (finished) tally.ok++;
        else tally.errors.push(`worker ${w} #${i}: the stream ended without a finish_reason`);
      } catch (e) {
        tally.errors.push(`worker ${w} #${i}: ${(e as Error).message}`);
      }
    }
  };
  const running_ = Array.from({ length: workers }, (_, w) => worker(w));
  return {
    tally,
    stop: async () => {
      running = false;
      await Promise.all(running_);
      return tally;
    },
  };
}

interface CanaryLook {
  at: number;
  step: number;
  since: number;
  stable: number;
  canary: number;
  verdict: string;
}

/** Samples a process's view of the chat rollout every 250 ms while it runs: each canary phase seen. */
function watchCanary(p: () => ServeProc): { stop: () => Promise<CanaryLook[]> } {
  const seen: CanaryLook[] = [];
  let on = true;
  const loop = (async () => {
    while (on) {
      const m = await chatModel(p()).catch(() => undefined);
      const r = m?.rollout;
      if (r?.phase === 'canary') seen.push({ at: Date.now(), step: r.step!, since: Date.parse(r.since), stable: r.arms?.stable.requests ?? 0, canary: r.arms?.canary.requests ?? 0, verdict: r.arms?.verdict ?? 'none' });
      await new Promise((res) => setTimeout(res, 250)); // deliberate: the sampler's period (each canary phase seen)
    }
  })();
  return {
    stop: async () => {
      on = false;
      await loop;
      return seen;
    },
  };
}

const promotedLogs = (p: ServeProc): Record<string, unknown>[] => logLines(p.out()).filter((l) => l.msg === PROMOTED);

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 7, embeddingLength: 256, layers: 4, tensorType: 'f16' });
  await fleet.push(files({ cacheRam: '16MiB', steps: '[50%]' }), 'chat: one replica, a one-step canary');
  const secret = join(fleet.secretsDir, 'webhook-secret');
  writeFileSync(secret, WEBHOOK_SECRET, { mode: 0o600 });
  const args = ['--etcd', etcd.endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', '3s', '--retry-period', '1s', '--webhook-secret-file', secret];
  procs = await Promise.all(['a', 'b', 'c'].map((name) => spawnServe({ name, fleet, args })));
  leader = await until('one agreed leader', 90_000, () => agreedLeader(procs), { diag });
  await until('chat ready (a first deploy: no rollout)', 180_000, () => settled(leader.proc), { diag });
  await until('every standby routing the replica', 30_000, async () => (await Promise.all(standbys().map((p) => settled(p)))).every(Boolean), { diag });
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('under HA the leader judges a canary step on every router\'s figures', { timeout: 15 * 60_000 }, () => {
  it('traffic through a standby only: the leader sees both arms from the standby\'s router and promotes', async (t) => {
    const standby = standbys()[0]!;
    const before = (await chatModel(leader.proc))!;
    const leaderRouted = await routedRequests(leader.proc);
    const load = shortLoad(clientOf(standby));
    await until('streams through the standby', 30_000, () => load.tally.ok > 0, { diag });
    const watch = watchCanary(() => leader.proc);
    await fleet.push(files({ cacheRam: '17MiB', steps: '[50%]' }), 'chat: cache_ram 17MiB');
    await pushWebhook(standby);
    const done = await until('promoted and settled on the new revision', 240_000, () => settled(leader.proc, before.digest), { diag });
    const tally = await load.stop();
    const looks = await watch.stop();
    const promoted = promotedLogs(leader.proc);
    t.diagnostic(`through standby ${standby.name}: sent ${tally.sent}, ok ${tally.ok}, failed or cut ${tally.errors.length}; the leader's last look at the step: ${JSON.stringify(looks.at(-1))}; promoted with ${String(promoted[0]?.figures)}`);

    assert.deepEqual(tally.errors, [], 'nothing failed or was cut through the standby');
    assert.ok((await routedRequests(standby)) >= tally.ok, 'the standby\'s router counted the requests it routed (its /metrics)');
    assert.equal(await routedRequests(leader.proc), leaderRouted, 'the leader\'s own router saw none of the model\'s requests');
    assert.equal(promoted.length, 1, `the leader promoted the revision:\n${diag()}`);
    assert.match(String(promoted[0]!.figures), /over (\d+) \/ (\d+) requests/);
    const [, canary, stable] = /over (\d+) \/ (\d+) requests/.exec(String(promoted[0]!.figures))!.map(Number);
    assert.ok(canary! >= MIN_REQUESTS && stable! >= MIN_REQUESTS, `the verdict counted the standby's requests on both arms (${canary} / ${stable})`);
    const last = looks.at(-1)!;
    assert.ok(last.canary > 0 && last.stable > 0, `the leader's view showed both arms' figures during the step: ${JSON.stringify(last)}`);
    assert.ok(Number(promoted[0]!.time) >= last.since + INTERVAL_S * 1000, 'promoted at the end of the step\'s interval, not before');
    assert.notEqual(done.digest, before.digest);
  });

  it('the leader SIGKILLed mid-step: the new leader resumes the same step, its window begins again, sums the other router\'s figures, and promotes as without the kill', async (t) => {
    // traffic through both standbys: whichever leads next, the other's router has figures it must count
    const both = standbys();
    const before = (await chatModel(leader.proc))!;
    const loads = new Map(both.map((p) => [p, shortLoad(clientOf(p), LOAD_WORKERS / 2)]));
    await until('streams through both standbys', 30_000, () => [...loads.values()].every((l) => l.tally.ok > 0), { diag });
    const watch = watchCanary(() => leader.proc);
    await fleet.push(files({ cacheRam: '18MiB', steps: '[30%, 60%]' }), 'chat: cache_ram 18MiB, a two-step canary');
    await pushWebhook(both[0]!);
    // in the middle of the second step, with figures on both arms
    const mid = await until('the leader judging the second step with figures on both arms', 180_000, async () => {
      const r = await liveRollout(leader.proc);
      if (r?.phase !== 'canary' || r.step !== 1 || !r.arms || r.arms.canary.requests === 0 || r.arms.stable.requests === 0) return null;
      return { since: Date.parse(r.since), step: r.step };
    }, { diag });
    const routedAtKill = new Map(await Promise.all(both.map(async (p) => [p, await routedRequests(p)] as const)));
    const killedAt = Date.now();
    assert.ok(killedAt < mid.since + INTERVAL_S * 1000, 'killed before the step ended');
    const oldLeader = leader;
    await leader.proc.sigkill();
    leader = await until('a new leader with a pass after the kill', (LEASE_S + 60) * 1000, () => agreedLeader(both, { epochAbove: oldLeader.epoch, passAfter: killedAt }), { diag });
    // from now on the new leader's own router takes no more of the load: its step is judged on the other's
    const own = await loads.get(leader.proc)!.stop();
    const other = both.find((p) => p !== leader.proc)!;
    const resumed = await until('the new leader at the same step, its window begun again', 60_000, async () => {
      const r = await liveRollout(leader.proc);
      return r?.phase === 'canary' && Date.parse(r.since) > mid.since ? { since: Date.parse(r.since), step: r.step } : null;
    }, { diag });
    const done = await until('promoted and settled on the new revision', 240_000, () => settled(leader.proc, before.digest), { diag });
    const ownRouted = (await routedRequests(leader.proc)) - routedAtKill.get(leader.proc)!;
    const rest = await loads.get(other)!.stop();
    const looks = await watch.stop();
    const promoted = promotedLogs(leader.proc);
    const begun = logLines(leader.proc.out()).filter((l) => l.msg === BEGUN_AGAIN);
    t.diagnostic(`killed ${oldLeader.proc.name} ${killedAt - mid.since} ms into step ${mid.step}; new leader ${leader.proc.name} resumed step ${String(resumed.step)} from ${resumed.since - killedAt} ms after the kill, its own router routing ${ownRouted} requests after the kill; through ${leader.proc.name}: sent ${own.sent}, ok ${own.ok}, failed or cut ${own.errors.length}; through ${other.name}: sent ${rest.sent}, ok ${rest.ok}, failed or cut ${rest.errors.length}; promoted with ${String(promoted[0]?.figures)}; ${looks.length} looks`);

    assert.equal(resumed.step, mid.step, 'the same step');
    assert.ok(resumed.since >= killedAt, 'its window began again after the kill (figures of the dead leader\'s window are not carried)');
    assert.equal(begun.length, 1, `the new leader said the step's window begins again:\n${diag()}`);
    assert.equal(begun[0]!.step, mid.step);
    assert.equal(promoted.length, 1, `the new leader promoted the revision, as without the kill:\n${diag()}`);
    assert.ok(Number(promoted[0]!.time) >= resumed.since + INTERVAL_S * 1000, 'no earlier than a whole interval after the window began again');
    const [, canary, stable] = /over (\d+) \/ (\d+) requests/.exec(String(promoted[0]!.figures))!.map(Number);
    assert.ok(canary! >= MIN_REQUESTS && stable! >= MIN_REQUESTS, `the verdict counted both arms (${canary} / ${stable})`);
    assert.ok(canary! + stable! > ownRouted, `the verdict (${canary} + ${stable}) counted the other router's requests, not only the ${ownRouted} the new leader's own router saw after the kill`);
    assert.deepEqual([...own.errors, ...rest.errors], [], 'nothing failed or was cut through either standby');
    assert.notEqual(done.digest, before.digest);
  });
});
