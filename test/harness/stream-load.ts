/**
 * Continuous streaming load through the official `openai` client (maxRetries: 0 on the caller's
 * client): `concurrency` workers each streaming one chat completion after another, every outcome
 * counted — ok (a finish_reason arrived), cut (the stream broke or ended without one after data),
 * failed (no data at all) — and llama-server processes sampled from /proc every 200 ms.
 */
import type OpenAI from 'openai';
import { replicaProcesses } from './replica-procs.js';

export interface Tally {
  sent: number;
  ok: number;
  cut: number;
  failed: number;
  errors: string[];
  /** [start, end, outcome, first chunk (null: none)] of every request (performance.now ms). */
  spans: [number, number, 'ok' | 'cut' | 'failed', number | null][];
}

/** How the workers stream: `maxTokens` (default 80–200, varied; or by worker and request), a pause between a worker's requests (default none). */
export interface StreamLoadOptions {
  readonly maxTokens?: number | ((worker: number, request: number) => number);
  /** Traffic with gaps: a replica's /slots reads 0 between requests, while a router may still send it more. */
  readonly pauseMs?: number;
}

/**
 * Workers streaming chat completions until stopped; every outcome counted. `streaming(since)`: how
 * many requests sent at or after `since` (performance.now ms) have their first chunk and have not
 * ended, so a test waits for streams in flight instead of sleeping: more of them than a replica has
 * slots are on more than one replica.
 */
export function streamLoad(client: OpenAI, model: string, concurrency: number, opts: StreamLoadOptions = {}): { stop: () => Promise<Tally>; tally: Tally; streaming: (since?: number) => number } {
  const tally: Tally = { sent: 0, ok: 0, cut: 0, failed: 0, errors: [], spans: [] };
  /** Each worker's request now: when it was sent and whether its first chunk came (null: between requests). */
  const current: ({ t0: number; first: boolean } | null)[] = Array.from({ length: concurrency }, () => null);
  let running = true;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; running; i++) {
      tally.sent++;
      const t0 = performance.now();
      let chunks = 0;
      let first: number | null = null;
      let finished = false;
      const now = { t0, first: false };
      current[w] = now;
      try {
        const stream = await client.chat.completions.create({
          model,
          messages: [{ role: 'user', content: `worker ${w} request ${i}: tell me about fleets` }],
          stream: true,
          max_tokens: typeof opts.maxTokens === 'function' ? opts.maxTokens(w, i) : (opts.maxTokens ?? 80 + ((w * 37 + i * 53) % 120)),
        });
        for await (const c of stream) {
          chunks++;
          first ??= performance.now();
          now.first = true;
          if (c.choices[0]?.finish_reason) finished = true;
        }
        if (finished) {
          tally.ok++;
          tally.spans.push([t0, performance.now(), 'ok', first]);
        } else {
          tally.cut++;
          tally.errors.push(`worker ${w} #${i}: stream ended after ${chunks} chunks without a finish_reason`);
          tally.spans.push([t0, performance.now(), 'cut', first]);
        }
      } catch (e) {
        const outcome = chunks > 0 ? 'cut' : 'failed';
        tally[outcome]++;
        tally.errors.push(`worker ${w} #${i} (${outcome} after ${chunks} chunks, ${Math.round(performance.now() - t0)} ms): ${(e as Error).message}`);
        tally.spans.push([t0, performance.now(), outcome, first]);
      }
      current[w] = null;
      if (opts.pauseMs && running) await new Promise((r) => setTimeout(r, opts.pauseMs));
    }
  };
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w));
  return {
    tally,
    streaming: (since = 0) => current.filter((c) => c !== null && c.first && c.t0 >= since).length,
    stop: async () => {
      running = false;
      await Promise.all(workers);
      return tally;
    },
  };
}

/** Samples the llama-server processes of every node every 200 ms; the highest count seen. */
export function sampleProcesses(dataDirs: readonly string[]): { stop: () => number } {
  let max = 0;
  const t = setInterval(() => {
    const n = dataDirs.reduce((s, d) => s + replicaProcesses(d).length, 0);
    max = Math.max(max, n);
  }, 200);
  return {
    stop: () => {
      clearInterval(t);
      return max;
    },
  };
}

