/** A client that keeps asking the router for a completion, one request at a time, until stopped. */
import { request } from 'undici';

export interface RouterClient {
  /** Requests answered 200 so far. */
  readonly ok: () => number;
  /** Resolves once `n` more requests (from now) have been answered 200. */
  answered(n: number): Promise<void>;
  /** Stops after the request in flight; what was answered and what failed ("<status> <body>"). */
  stop(): Promise<{ readonly ok: number; readonly failures: readonly string[] }>;
}

export function keepAsking(routerUrl: string, model: string): RouterClient {
  let ok = 0;
  const failures: string[] = [];
  let running = true;
  const waiters: { at: number; resolve: () => void }[] = [];
  const loop = (async () => {
    while (running) {
      const res = await request(`${routerUrl}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }),
      }).catch((e: unknown) => ({ statusCode: 0, body: { text: async () => String(e) } }));
      const text = await res.body.text();
      if (res.statusCode !== 200) {
        failures.push(`${res.statusCode} ${text.slice(0, 200)}`);
        continue;
      }
      ok++;
      for (const w of waiters.splice(0)) if (ok >= w.at) w.resolve();
      else waiters.push(w);
    }
  })();
  return {
    ok: () => ok,
    answered: (n) => new Promise<void>((resolve) => waiters.push({ at: ok + n, resolve })),
    async stop() {
      running = false;
      await loop;
      return { ok, failures };
    },
  };
}
