/**
 * Scaling with demand (#42) under a load that comes and goes, on the real stack: a real `llmgw
 * serve` on an sshd node running real llama-server, an on-demand model with `max_replicas: 3` and
 * one-slot replicas, six `openai` clients streaming (maxRetries 0) in phases on / off / on / off /
 * on. The issue's 20 s on, 20 s off under down_after 60s, scaled down by the same factor (0.4):
 * 8 s on, 8 s off under down_after 24s — down_after three times the gap, as in the issue (an off
 * phase is counted from the end of the on phase's last request). Everything
 * is read through the admin API: the model's count (polled through the test) and the event feed.
 *
 * The count goes up in the first on phase and never comes down while the load comes and goes; no
 * replica is started and stopped within down_after (the issue's minute); no request fails. Then the
 * load stops for good and the count steps down once down_after has passed — the one stop of the test,
 * of a replica that ran longer than down_after.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import type { EventJson, EventsJson } from '../../src/wire/events.js';
import type { ModelJson } from '../../src/wire/shape.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { scaleFleetFiles } from '../harness/scale-files.js';
import { procsDiag, spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { streamLoad, type Tally } from '../harness/stream-load.js';
import { until } from '../harness/wait.js';

const PHASE_MS = 8_000;
const DOWN_AFTER_MS = 24_000;
const MODEL = 'oo';

let fleet: TestFleet;
let serve: ServeProc;
let client: OpenAI;

const diag = (): string => procsDiag([serve], 4000);

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'oo.gguf'), { seed: 42, embeddingLength: 512, layers: 8, tensorType: 'f16' });
  // no poll passes (1 h): the looks are the ones the decision asks for, and those requests cause
  const f = scaleFleetFiles(fleet, { model: MODEL, gguf: chat, scale: `{ target: 80%, up_after: 2s, down_after: ${DOWN_AFTER_MS / 1000}s }` });
  // this 2-core machine's node would take 2 one-thread replicas (the cores rule: scale-place and
  // scale-short-evict test it); it is declared with 4 so the test reaches max_replicas: 3
  f['nodes/node-1.yaml'] += 'capacity: { cpus: 4 }\n';
  await fleet.push(f, 'an on-demand model that scales to 3, down_after 24s');
  serve = await spawnServe({ name: 'solo', fleet });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${serve.routerPort}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  await serve?.sigkill();
  await fleet?.cleanup();
});

describe('a load of 8 s on, 8 s off under down_after 24s (the issue\'s 20/20/60 scaled by 0.4)', { timeout: 4 * 60_000 }, () => {
  it('scales out once, never in while the load comes and goes, starts and stops no replica within down_after, fails nothing; steps down after down_after once it stops', async () => {
    await until('the model in the admin API', 60_000, async () => (await serve.admin<{ models: ModelJson[] }>('/models')).models.some((m) => m.name === MODEL), { diag });

    // the count and the live replicas through the test, from the admin API
    const counts: { at: number; count: number | null; replicas: string[] }[] = [];
    const observe = async (): Promise<void> => {
      const m = (await serve.admin<{ model: ModelJson }>(`/models/${MODEL}`)).model;
      counts.push({ at: Date.now(), count: m.scale?.count ?? null, replicas: m.replicas.filter((r) => r.phase !== 'stopping').map((r) => r.id) });
    };
    /** A phase of `ms` with the count read every 250 ms (an off phase, or the rest of an on phase). */
    const marks: string[] = [];
    const phase = (what: string, ms: number): Promise<boolean> => {
      const end = Date.now() + ms;
      marks.push(`${what} +${Date.now() - t0} ms`);
      return until(what, ms + 30_000, async () => (await observe(), Date.now() >= end), { everyMs: 250, diag });
    };
    const t0 = Date.now();
    const tallies: Tally[] = [];
    let lastSent = 0;
    const on = async (n: number): Promise<void> => {
      // short requests (a second or two): the phase's last ones end soon after it
      const load = streamLoad(client, MODEL, 6, { maxTokens: (w, i) => 16 + ((w * 7 + i * 5) % 16) });
      await phase(`on phase ${n}`, PHASE_MS);
      lastSent = Date.now(); // no request starts after this; the router's load falls to 0 as they end
      tallies.push(await load.stop()); // the phase's requests end: the load is 0 from here
    };

    await on(1);
    await phase('off phase 1', PHASE_MS);
    await on(2);
    await phase('off phase 2', PHASE_MS);
    await on(3);
    const loadEnded = Date.now();
    await observe();

    const sum = (k: 'sent' | 'ok' | 'cut' | 'failed'): number => tallies.reduce((n, t) => n + t[k], 0);
    assert.deepEqual({ cut: sum('cut'), failed: sum('failed') }, { cut: 0, failed: 0 }, `no request failed: ${tallies.flatMap((t) => t.errors).join('; ')}`);
    const during = counts.filter((c) => c.count !== null);
    const most = Math.max(...during.map((c) => c.count!));
    assert.ok(most >= 2, `the load took the count up (counts seen: ${[...new Set(during.map((c) => c.count))].join(', ')})`);
    const firstUp = during.findIndex((c) => c.count! >= 2);
    const afterUp = during.slice(firstUp);
    const when = async (): Promise<string> => `${(await serve.admin<EventsJson>(`/events?model=${MODEL}`)).events.filter((e) => e.kind === 'scaled').map((e) => `${e.message} at +${Date.parse(e.at) - t0} ms`).join('; ')} (phases: ${marks.join(', ')}, load ended +${loadEnded - t0} ms)`;
    const fell = afterUp.findIndex((c, i) => i > 0 && c.count! < afterUp[i - 1]!.count!);
    assert.equal(fell, -1, `no scale-in while the load came and went: ${fell >= 0 ? await when() : ''}`);

    const feed = async (): Promise<EventJson[]> => (await serve.admin<EventsJson>(`/events?model=${MODEL}`)).events.slice().reverse();
    const scaledOf = (es: readonly EventJson[]) => es.filter((e) => e.kind === 'scaled').map((e) => ({ at: Date.parse(e.at), ...parseScaled(e.message) }));
    const during1 = await feed();
    const ups = scaledOf(during1);
    assert.ok(ups.length >= 1 && ups.every((s) => s.to > s.from), `only scale-outs while the load came and went: ${during1.filter((e) => e.kind === 'scaled').map((e) => e.message).join('; ')}`);
    assert.deepEqual(during1.filter((e) => e.kind === 'replica-stopped').map((e) => e.message), [], 'no replica stopped while the load came and went');
    // every replica that started is still there
    const started = new Set(during1.filter((e) => e.kind === 'replica-starting').map((e) => e.replica!));
    const live = new Set(counts.at(-1)!.replicas);
    assert.deepEqual([...started].filter((r) => !live.has(r)), [], 'every replica started is still running');
    assert.ok(started.size <= 3, `${started.size} replicas started: above max_replicas`);

    // the load gone for good: one step down, once down_after has passed (the model stays active: idle_timeout 10m)
    await until('a step down after the load stopped', DOWN_AFTER_MS + 60_000, async () => {
      await observe();
      return scaledOf(await feed()).some((s) => s.to < s.from);
    }, { everyMs: 250, diag });
    const all = await feed();
    const down = scaledOf(all).find((s) => s.to < s.from)!;
    assert.deepEqual([down.from, down.to], [most, most - 1], 'one replica at a time');
    // the router's load fell to 0 between lastSent and loadEnded (the client sees a response end after the router)
    assert.ok(down.at - lastSent >= DOWN_AFTER_MS, `the step down came ${down.at - lastSent} ms after the last request was sent: before down_after`);
    // no replica started and stopped within down_after (the issue's minute): the stop comes later from its start
    await until('the surplus replica stopped', 60_000, async () => (await feed()).some((e) => e.kind === 'replica-stopped'), { diag });
    const final = await feed();
    const startOf = new Map(final.filter((e) => e.kind === 'replica-starting').map((e) => [e.replica!, Date.parse(e.at)]));
    const stops = final.filter((e) => e.kind === 'replica-stopped');
    for (const s of stops) {
      const st = startOf.get(s.replica!);
      assert.ok(st !== undefined, `a start event of ${s.replica}`);
      assert.ok(Date.parse(s.at) - st >= DOWN_AFTER_MS, `${s.replica} started and stopped ${Date.parse(s.at) - st} ms apart: within down_after`);
    }
    console.log(JSON.stringify({
      loadMs: loadEnded - t0,
      requests: sum('sent'),
      ok: sum('ok'),
      counts: during.map((c) => c.count).filter((c, i, a) => i === 0 || c !== a[i - 1]),
      scaled: scaledOf(final).map((s) => `${s.from}→${s.to} at +${s.at - t0} ms`),
      stepDownAfterLoadEndedMs: down.at - loadEnded,
      stops: stops.map((s) => `${s.replica} after ${Date.parse(s.at) - startOf.get(s.replica!)!} ms`),
    }));
  });
});

function parseScaled(message: string): { from: number; to: number } {
  const m = /scaled (\d+) → (\d+)/.exec(message);
  if (!m) throw new Error(`not a scaled event: ${message}`);
  return { from: Number(m[1]), to: Number(m[2]) };
}
