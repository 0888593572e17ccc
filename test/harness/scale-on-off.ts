/**
 * Scaling with demand (#42) under a load that comes and goes, on the real stack: a real `llmgw
 * serve` on an sshd node running real llama-server, an on-demand model with `max_replicas: 3` and
 * one-slot replicas, six `openai` clients streaming (maxRetries 0) in phases on / off / on / … , the
 * on and off phases `phaseMs` long under `down_after` (an off phase is counted from the end of the
 * on phase's last request). Shared by test/integration/scale-on-off.test.ts (the issue's 20 s / 20 s
 * / 60 s scaled by 0.4) and bench/scale-on-off.bench.ts (the issue's own periods).
 *
 * Everything is read through the public interface: the model's count from the admin API (polled
 * every 250 ms), the event feed, and serve's own log lines. The phases go on until `cycles` off + on
 * cycles have run past the first scale-out. Checked (node:assert, so a miss throws with the
 * figures): the count goes up and never comes down while the load comes and goes; no replica is
 * started and stopped within down_after (the issue's minute at full periods); no request fails.
 * Then the load stops for good and the count steps down once down_after has passed — the one stop
 * of the run, of a replica that ran longer than down_after.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { EventJson, EventsJson } from '../../src/wire/events.js';
import type { ModelJson } from '../../src/wire/shape.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { startTestFleet, type TestFleet } from './controller.js';
import { scaleFleetFiles } from './scale-files.js';
import { logLines, procsDiag, spawnServe, type ServeProc } from './serve-proc.js';
import { streamLoad, type Tally } from './stream-load.js';
import { until } from './wait.js';

export interface OnOffOptions {
  readonly phaseMs: number;
  readonly upAfterMs: number;
  readonly downAfterMs: number;
  /** Off + on cycles that must run past the first scale-out (the issue: at least 2). */
  readonly cycles: number;
  /** On phases at most, the first included: the run fails if the cycles have not run by then. */
  readonly maxOnPhases: number;
}

export interface OnOffFigures {
  readonly phaseMs: number;
  readonly upAfterMs: number;
  readonly downAfterMs: number;
  readonly loadMs: number;
  readonly onPhases: number;
  readonly cyclesAfterFirstUp: number;
  readonly requests: number;
  readonly ok: number;
  readonly failed: number;
  /** The count as the admin API read it, each change once. */
  readonly counts: (number | null)[];
  readonly firstUpAtMs: number;
  readonly scaled: string[];
  readonly phases: string[];
  readonly stepDownAfterLastSentMs: number;
  /** Each stopped replica and how long after its start it stopped. */
  readonly stops: string[];
  readonly shortestStartToStopMs: number;
}

const MODEL = 'oo';

export async function onOffRun(o: OnOffOptions): Promise<OnOffFigures> {
  assert.ok(o.cycles >= 1 && o.maxOnPhases >= o.cycles + 1, 'on phases enough for the cycles');
  let fleet: TestFleet | undefined;
  let serve: ServeProc | undefined;
  try {
    fleet = await startTestFleet({ nodes: 1 });
    const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'oo.gguf'), { seed: 42, embeddingLength: 512, layers: 8, tensorType: 'f16' });
    // no poll passes (1 h): the looks are the ones the decision asks for, and those requests cause
    const f = scaleFleetFiles(fleet, { model: MODEL, gguf: chat, scale: `{ target: 80%, up_after: ${o.upAfterMs / 1000}s, down_after: ${o.downAfterMs / 1000}s }` });
    // this 2-core machine's node would take 2 one-thread replicas (the cores rule: scale-place and
    // scale-short-evict test it); it is declared with 4 so the run reaches max_replicas: 3
    f['nodes/node-1.yaml'] += 'capacity: { cpus: 4 }\n';
    await fleet.push(f, `an on-demand model that scales to 3, down_after ${o.downAfterMs / 1000}s`);
    // serve's `scaled` log lines, all of them (out() keeps only the tail of a long run)
    const scaledLogs: Record<string, unknown>[] = [];
    let partial = '';
    const onOutput = (text: string): void => {
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      scaledLogs.push(...logLines(lines.filter((l) => l.includes('"scaled ')).join('\n')).filter((l) => typeof l['msg'] === 'string' && (l['msg'] as string).startsWith('scaled ')));
    };
    serve = await spawnServe({ name: 'solo', fleet, onOutput });
    return await run(serve, o, scaledLogs);
  } finally {
    await serve?.sigkill();
    await fleet?.cleanup();
  }
}

async function run(serve: ServeProc, o: OnOffOptions, scaledLogs: readonly Record<string, unknown>[]): Promise<OnOffFigures> {
  const diag = (): string => procsDiag([serve], 4000);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${serve.routerPort}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  await until('the model in the admin API', 60_000, async () => (await serve.admin<{ models: ModelJson[] }>('/models')).models.some((m) => m.name === MODEL), { diag });

  // the count and the live replicas through the run, from the admin API
  const counts: { at: number; count: number | null; replicas: string[] }[] = [];
  const observe = async (): Promise<void> => {
    const m = (await serve.admin<{ model: ModelJson }>(`/models/${MODEL}`)).model;
    counts.push({ at: Date.now(), count: m.scale?.count ?? null, replicas: m.replicas.filter((r) => r.phase !== 'stopping').map((r) => r.id) });
  };
  const firstUpAt = (): number | null => counts.find((c) => (c.count ?? 0) >= 2)?.at ?? null;
  /** A phase of `ms` with the count read every 250 ms (an off phase, or the rest of an on phase). */
  const marks: string[] = [];
  const offStarts: number[] = [];
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
    await phase(`on phase ${n}`, o.phaseMs);
    lastSent = Date.now(); // no request starts after this; the router's load falls to 0 as they end
    tallies.push(await load.stop()); // the phase's requests end: the load is 0 from here
  };
  const cyclesAfterUp = (): number => {
    const up = firstUpAt();
    return up === null ? 0 : offStarts.filter((s) => s > up).length;
  };

  let onPhases = 1;
  await on(1);
  while (cyclesAfterUp() < o.cycles && onPhases < o.maxOnPhases) {
    offStarts.push(Date.now());
    await phase(`off phase ${onPhases}`, o.phaseMs);
    onPhases++;
    await on(onPhases);
  }
  const loadEnded = Date.now();
  await observe();

  const sum = (k: 'sent' | 'ok' | 'cut' | 'failed'): number => tallies.reduce((n, t) => n + t[k], 0);
  assert.deepEqual({ cut: sum('cut'), failed: sum('failed') }, { cut: 0, failed: 0 }, `no request failed: ${tallies.flatMap((t) => t.errors).join('; ')}`);
  const during = counts.filter((c) => c.count !== null);
  const most = Math.max(...during.map((c) => c.count!));
  assert.ok(most >= 2, `the load took the count up (counts seen: ${[...new Set(during.map((c) => c.count))].join(', ')})`);
  assert.ok(cyclesAfterUp() >= o.cycles, `${o.cycles} off + on cycles after the first scale-out (at +${firstUpAt()! - t0} ms) within ${o.maxOnPhases} on phases: ${marks.join(', ')}`);
  const firstUp = during.findIndex((c) => c.count! >= 2);
  const afterUp = during.slice(firstUp);
  const feed = async (): Promise<EventJson[]> => (await serve.admin<EventsJson>(`/events?model=${MODEL}`)).events.slice().reverse();
  const scaledOf = (es: readonly EventJson[]) => es.filter((e) => e.kind === 'scaled').map((e) => ({ at: Date.parse(e.at), ...parseScaled(e.message) }));
  const when = async (): Promise<string> => `${scaledOf(await feed()).map((s) => `${s.from} → ${s.to} at +${s.at - t0} ms`).join('; ')} (phases: ${marks.join(', ')}, load ended +${loadEnded - t0} ms)`;
  const fell = afterUp.findIndex((c, i) => i > 0 && c.count! < afterUp[i - 1]!.count!);
  assert.equal(fell, -1, `no scale-in while the load came and went (admin API count): ${fell >= 0 ? await when() : ''}`);

  const during1 = await feed();
  const ups = scaledOf(during1);
  assert.ok(ups.length >= 1 && ups.every((s) => s.to > s.from), `only scale-outs while the load came and went (events): ${await when()}`);
  assert.deepEqual(during1.filter((e) => e.kind === 'replica-stopped').map((e) => e.message), [], 'no replica stopped while the load came and went');
  // serve's own log lines say the same (a scale-in would log `scaled oo N → N-1` with direction down)
  const downLogs = (): Record<string, unknown>[] => scaledLogs.filter((l) => l['model'] === MODEL && l['direction'] === 'down');
  assert.ok(scaledLogs.some((l) => l['model'] === MODEL && l['direction'] === 'up'), `the scale-out logged: ${scaledLogs.map((l) => l['msg']).join('; ')}`);
  assert.deepEqual(downLogs().map((l) => l['msg']), [], 'no scale-in logged while the load came and went');
  // every replica that started is still there
  const started = new Set(during1.filter((e) => e.kind === 'replica-starting').map((e) => e.replica!));
  const live = new Set(counts.at(-1)!.replicas);
  assert.deepEqual([...started].filter((r) => !live.has(r)), [], 'every replica started is still running');
  assert.ok(started.size <= 3, `${started.size} replicas started: above max_replicas`);

  // the load gone for good: one step down, once down_after has passed (the model stays active: idle_timeout 10m)
  await until('a step down after the load stopped', o.downAfterMs + 60_000, async () => {
    await observe();
    return scaledOf(await feed()).some((s) => s.to < s.from);
  }, { everyMs: 250, diag });
  const all = await feed();
  const down = scaledOf(all).find((s) => s.to < s.from)!;
  assert.deepEqual([down.from, down.to], [most, most - 1], 'one replica at a time');
  // the router's load fell to 0 between lastSent and loadEnded (the client sees a response end after the router)
  assert.ok(down.at - lastSent >= o.downAfterMs, `the step down came ${down.at - lastSent} ms after the last request was sent: before down_after`);
  await until('the step down in serve\'s log', 30_000, () => downLogs().length >= 1, { diag });
  assert.equal(downLogs().length, 1, 'the step down logged once');
  // no replica started and stopped within down_after (the issue's minute): the stop comes later from its start
  await until('the surplus replica stopped', 60_000, async () => (await feed()).some((e) => e.kind === 'replica-stopped'), { diag });
  const final = await feed();
  const startOf = new Map(final.filter((e) => e.kind === 'replica-starting').map((e) => [e.replica!, Date.parse(e.at)]));
  const stops = final.filter((e) => e.kind === 'replica-stopped');
  const lived: number[] = [];
  for (const s of stops) {
    const st = startOf.get(s.replica!);
    assert.ok(st !== undefined, `a start event of ${s.replica}`);
    lived.push(Date.parse(s.at) - st);
    assert.ok(Date.parse(s.at) - st >= o.downAfterMs, `${s.replica} started and stopped ${Date.parse(s.at) - st} ms apart: within down_after`);
  }
  return {
    phaseMs: o.phaseMs,
    upAfterMs: o.upAfterMs,
    downAfterMs: o.downAfterMs,
    loadMs: loadEnded - t0,
    onPhases,
    cyclesAfterFirstUp: cyclesAfterUp(),
    requests: sum('sent'),
    ok: sum('ok'),
    failed: sum('cut') + sum('failed'),
    counts: during.map((c) => c.count).filter((c, i, a) => i === 0 || c !== a[i - 1]),
    firstUpAtMs: firstUpAt()! - t0,
    scaled: scaledOf(final).map((s) => `${s.from}→${s.to} at +${s.at - t0} ms`),
    phases: marks,
    stepDownAfterLastSentMs: down.at - lastSent,
    stops: stops.map((s) => `${s.replica} after ${Date.parse(s.at) - startOf.get(s.replica!)!} ms`),
    shortestStartToStopMs: Math.min(...lived),
  };
}

function parseScaled(message: string): { from: number; to: number } {
  const m = /scaled (\d+) → (\d+)/.exec(message);
  if (!m) throw new Error(`not a scaled event: ${message}`);
  return { from: Number(m[1]), to: Number(m[2]) };
}
