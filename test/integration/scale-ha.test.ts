/**
 * Scaling with demand (#42) under HA on the real stack: three real `llmgw serve --etcd` on one real
 * etcd, over an sshd node running real llama-server. Two of them route the load, half each (two
 * `openai` clients streaming through each, maxRetries 0); the third leads and carries none, so what it
 * scales on comes to it only through the two routers' reports in etcd. The model is on demand with
 * `max_replicas: 3`, one slot per replica and `target: 100%`: a half (at most 2 requests) alone wants
 * 2 replicas; the sum (4) wants 3.
 *
 * SIGKILL of the leader while its scale-out's replicas are still starting: one of the two routers
 * takes over from the record in etcd (its own load read live, the other's from etcd), keeps the count
 * (it never shows less, sampled through the admin API), brings the replicas up without running more
 * llama-server processes than the count, and no request of either router fails.
 *
 * Three processes, not two: the leader is SIGKILLed, and a router that dies cuts its clients'
 * streams; the load rides on the two that survive.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import type { EventsJson } from '../../src/wire/events.js';
import type { ModelJson } from '../../src/wire/shape.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { scaleFleetFiles } from '../harness/scale-files.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { agreedLeader, procsDiag, spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { streamLoad } from '../harness/stream-load.js';
import { until } from '../harness/wait.js';

const LEASE_S = 4;
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', '3s', '--retry-period', '1s'];
const MODEL = 'hs';
const PER_ROUTER = 2;

let etcd: EtcdInstance;
let fleet: TestFleet;
let procs: ServeProc[] = [];

const diag = (): string => procsDiag(procs, 3000);
const modelOn = async (p: ServeProc): Promise<ModelJson> => (await p.admin<{ model: ModelJson }>(`/models/${MODEL}`)).model;

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'hs.gguf'), { seed: 42, embeddingLength: 512, layers: 8, tensorType: 'f16' });
  const f = scaleFleetFiles(fleet, { model: MODEL, gguf: chat, scale: '{ target: 100%, up_after: 2s, down_after: 5m }' });
  // this 2-core machine's node would take 2 one-thread replicas (the cores rule: scale-place and
  // scale-short-evict test it); it is declared with 4 so the test reaches max_replicas: 3
  f['nodes/node-1.yaml'] += 'capacity: { cpus: 4 }\n';
  await fleet.push(f, 'an on-demand model that scales to 3 on the routers\' summed load');
  procs = await Promise.all(['a', 'b', 'c'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('two routers each carrying half of the load, on etcd', { timeout: 5 * 60_000 }, () => {
  it('the leader scales on the sum; SIGKILL of the leader during the scale-out keeps the count, fails no request', async () => {
    const leader = await until('one agreed leader', 90_000, () => agreedLeader(procs), { diag });
    const routers = procs.filter((p) => p !== leader.proc);
    await until('the model in every instance\'s admin API', 60_000, async () => (await Promise.all(procs.map(modelOn))).every((m) => m.name === MODEL), { diag });

    // llama-server processes on the node, every 200 ms, through the whole test
    let mostProcs = 0;
    const sampler = setInterval(() => void (mostProcs = Math.max(mostProcs, replicaProcesses(fleet.nodes[0]!.dataDir).length)), 200);
    const loads = routers.map((r) => streamLoad(new OpenAI({ baseURL: `http://127.0.0.1:${r.routerPort}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 }), MODEL, PER_ROUTER, { maxTokens: (w, i) => 48 + ((w * 7 + i * 5) % 32) }));
    try {
      // the scale-out decided, its replicas still starting: seen on the leader (its own snapshot: a
      // router's view comes through etcd, and a start now takes about a second, #38, so a router
      // may see the count and the replicas ready at once)
      const atKill = await until('a scale-out with replicas still starting', 120_000, async () => {
        const m = await modelOn(leader.proc);
        const count = m.scale?.count ?? 0;
        return count > 1 && m.replicas.filter((r) => r.phase === 'ready').length < count ? { count, why: m.scale!.last?.why ?? '', replicas: m.replicas.map((r) => `${r.id} ${r.phase}`) } : null;
      }, { everyMs: 100, diag });
      const killedAt = Date.now();
      await leader.proc.sigkill();

      // the sum: what the leader scaled on is more than one router ever carries
      const m = /(\d+) busy and (\d+) waiting/.exec(atKill.why);
      assert.ok(m, `the scale-out's numbers: ${atKill.why}`);
      assert.ok(Number(m[1]) + Number(m[2]) > PER_ROUTER, `scaled on ${atKill.why}: no more than one router's load`);

      // the count as both routers show it, every 250 ms, until the new leader has the count ready
      const seen: { at: number; who: string; count: number | null; ready: number }[] = [];
      const next = await until('a new leader, after a pass begun after the kill, with the count ready', (LEASE_S + 90) * 1000, async () => {
        for (const r of routers) {
          const mj = await modelOn(r);
          seen.push({ at: Date.now(), who: r.name, count: mj.scale?.count ?? null, ready: mj.replicas.filter((x) => x.phase === 'ready').length });
        }
        const l = await agreedLeader(routers, { epochAbove: leader.epoch, passAfter: killedAt });
        if (!l) return null;
        const mj = await modelOn(l.proc);
        return mj.scale && mj.scale.count >= atKill.count && mj.replicas.filter((x) => x.phase === 'ready').length >= mj.scale.count ? { ...l, model: mj } : null;
      }, { everyMs: 250, diag });
      const failoverMs = Date.now() - killedAt;
      const tallies = await Promise.all(loads.map((l) => l.stop()));
      clearInterval(sampler);

      const dropped = seen.filter((s) => s.count === null || s.count < atKill.count);
      assert.deepEqual(dropped, [], `the count dropped back from ${atKill.count} after the kill`);
      assert.equal(next.model.scale!.count, 3, `the sum (4 requests on one-slot replicas) wants 3; each half alone ${PER_ROUTER}`);
      const events = (await next.proc.admin<EventsJson>(`/events?model=${MODEL}`)).events;
      const downs = events.filter((e) => {
        const c = e.kind === 'scaled' ? /scaled (\d+) → (\d+)/.exec(e.message) : null;
        return c !== null && Number(c[2]) < Number(c[1]);
      });
      assert.deepEqual(downs.map((e) => e.message), [], 'no scale-in');
      assert.ok(mostProcs <= 3, `${mostProcs} llama-server processes at once: above max_replicas`);
      const sum = (k: 'sent' | 'ok' | 'cut' | 'failed'): number => tallies.reduce((n, t) => n + t[k], 0);
      assert.deepEqual({ cut: sum('cut'), failed: sum('failed') }, { cut: 0, failed: 0 }, `no request failed: ${tallies.flatMap((t) => t.errors).slice(0, 8).join('; ')}\n${diag()}`);
      assert.ok(tallies.every((t) => t.ok >= 1), `each router served: ${tallies.map((t) => t.ok).join(', ')}`);
      console.log(JSON.stringify({ atKill, killedLeader: leader.proc.name, newLeader: next.proc.name, failoverToCountReadyMs: failoverMs, countsSeen: [...new Set(seen.map((s) => s.count))], requests: sum('sent'), ok: sum('ok'), mostProcs }));
    } finally {
      clearInterval(sampler);
      await Promise.all(loads.map((l) => l.stop()));
    }
  });
});
