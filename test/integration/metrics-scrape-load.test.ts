/**
 * Scrapes of /metrics at 1,000 models do not hold up the router (#28): a real `llmgw serve` on a local
 * node with 1,000 on-demand models and one always-on tiny model ("hot", real llama-server). The router
 * serves "hot" at a steady open-loop rate while curl scrapes /metrics 4 times a second (60× Prometheus'
 * 15 s, from a process of its own), against the same rate without scrapes, in interleaved rounds (the order turns each round, so a
 * change in the machine's speed lands on both alike). The check is a ratio of the router's p99 with
 * scrapes to its p99 without, from the same run.
 *
 * Bound: 2×. A scrape at 1,000 models renders ~0.8 MB in ~2–3 ms of event-loop time (bench:metrics),
 * so at 4 scrapes a second about 1 % of the loop's time is a scrape, and a request that meets one waits
 * at most its length: the p99 should move by a few ms at most on a request of ~5–20 ms (ratio ~1.0–1.3).
 * Before the metrics were sized by traffic a scrape took 115–146 ms (4.5 MB), half of the loop's time
 * at this rate: the p99 went up by about a scrape's length, many times over. 2× leaves room for the
 * shared 2-core VM, where other work moves a phase's p99 by tens of percent; the +5 ms of the issue is
 * printed, not asserted (an absolute time on this machine).
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { chatOnce, makeScaleFleet, sampleOf, serveScaleFleet, waitFor, type ScaleFleet, type ScaleServe } from '../harness/scale-fleet.js';

const MODELS = 1000;
const ROUNDS = 6;
const PHASE_MS = 3000;
const RATE_PER_S = 15;
const SCRAPE_EVERY_MS = 250;
const BOUND = 2;

let fleet: ScaleFleet;
let serve: ScaleServe;

before(async () => {
  fleet = await makeScaleFleet(MODELS);
  serve = await serveScaleFleet(fleet);
  await waitFor('"hot" to answer through the router', 180_000, serve, async () => (await chatOnce(serve.routerUrl, 'hot')).status === 200);
});

after(async () => {
  await serve?.stop();
  fleet?.cleanup();
});

const pct = (xs: readonly number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const p99 = (xs: readonly number[]): number => pct(xs, 99);
const shape = (xs: readonly number[]): string => [50, 90, 95, 99, 100].map((p) => `p${p} ${pct(xs, p).toFixed(1)}`).join(', ');

/**
 * /metrics scraped by curl every SCRAPE_EVERY_MS in a shell loop of its own (so reading the ~1 MB body
 * costs this process nothing, and its request timings stay the router's); stop() ends it and gives
 * the scrapes' sizes.
 */
function scraper(): { stop(): Promise<number[]> } {
  const sh = spawn('sh', ['-c', `while :; do curl -s -o /dev/null -w '%{size_download}\\n' ${serve.adminUrl}/metrics; sleep ${SCRAPE_EVERY_MS / 1000}; done`], { stdio: ['ignore', 'pipe', 'ignore'], detached: true });
  let out = '';
  sh.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  return {
    async stop() {
      const exited = new Promise((r) => sh.once('exit', r));
      process.kill(-sh.pid!, 'SIGTERM'); // the loop and its curl
      await exited;
      return out.split('\n').filter(Boolean).map(Number);
    },
  };
}

/** Requests to "hot" at RATE_PER_S for PHASE_MS, sent on a clock (not one after another), with or without scrapes beside them. */
async function phase(scrapes: boolean): Promise<{ latencies: number[]; sizes: number[] }> {
  const pending: Promise<{ status: number; ms: number }>[] = [];
  const scraping = scrapes ? scraper() : null;
  let sizes: number[] = [];
  try {
    const end = performance.now() + PHASE_MS;
    for (let next = performance.now(); next < end; next += 1000 / RATE_PER_S) {
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      pending.push(chatOnce(serve.routerUrl, 'hot'));
    }
  } finally {
    // every request settles and the scraper ends before the phase does, whatever failed
    await Promise.allSettled(pending);
    sizes = (await scraping?.stop()) ?? [];
  }
  const results = await Promise.all(pending);
  for (const r of results) assert.equal(r.status, 200, 'every request to "hot" answered 200');
  return { latencies: results.map((r) => r.ms), sizes };
}

describe(`/metrics scrapes under router load at ${MODELS} models (real serve, real llama-server)`, { timeout: 10 * 60_000 }, () => {
  it(`the router's p99 with scrapes stays within ${BOUND}× its p99 without, in the same run`, async (t) => {
    for (let i = 0; i < 40; i++) await chatOnce(serve.routerUrl, 'hot'); // warm-up
    const quiet: number[] = [];
    const scraped: number[] = [];
    let bytes = 0;
    let count = 0;
    for (let round = 0; round < ROUNDS; round++) {
      for (const withScrapes of round % 2 === 0 ? [false, true] : [true, false]) {
        const r = await phase(withScrapes);
        (withScrapes ? scraped : quiet).push(...r.latencies);
        if (withScrapes) {
          bytes = r.sizes.at(-1) ?? 0;
          count += r.sizes.length;
        }
      }
    }
    const metrics = await (await fetch(`${serve.adminUrl}/metrics`)).text();
    const [q, s] = [p99(quiet), p99(scraped)];
    const ratio = s / q;
    t.diagnostic(`${quiet.length} requests without scrapes: p99 ${q.toFixed(1)} ms; ${scraped.length} with ${count} scrapes of ${(bytes / 1e6).toFixed(2)} MB: p99 ${s.toFixed(1)} ms; ratio ${ratio.toFixed(2)} (bound ${BOUND}), +${(s - q).toFixed(1)} ms (issue: ≤ 5 ms)`);
    t.diagnostic(`without: ${shape(quiet)} ms; with: ${shape(scraped)} ms`);
    t.diagnostic(`llmgw_event_loop_delay_p99_seconds ${sampleOf(metrics, 'llmgw_event_loop_delay_p99_seconds')}, llmgw_event_loop_delay_max_seconds ${sampleOf(metrics, 'llmgw_event_loop_delay_max_seconds')}`);
    assert.ok(count >= ROUNDS * (PHASE_MS / SCRAPE_EVERY_MS) * 0.5, `the scraper ran (${count} scrapes)`);
    assert.ok(bytes > 100_000, `a scrape holds the 1,000 models' series (${bytes} bytes)`);
    // the controller's loop is sampled: the delay gauges are exported and hold a measured value
    assert.ok(sampleOf(metrics, 'llmgw_event_loop_delay_max_seconds') > 0, 'llmgw_event_loop_delay_max_seconds > 0');
    assert.ok(ratio <= BOUND, `p99 with scrapes ${s.toFixed(1)} ms is ${ratio.toFixed(2)}× the p99 without (${q.toFixed(1)} ms); bound ${BOUND}×`);
  });
});
