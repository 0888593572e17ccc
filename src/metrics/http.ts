/** `/metrics` on a Fastify app (the admin port, or a port of its own). */
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { LlmgwMetrics } from './registry.js';

/**
 * A scrape is sent in slices of this size with a turn of the event loop between them: at 1,000
 * models the body is ~1 MB, and written in one piece its socket write held the loop (and every
 * request the router was serving) for several ms; a slice takes a fraction of one.
 */
const SLICE_BYTES = 64 * 1024;

async function* slices(parts: readonly Buffer[]): AsyncGenerator<Buffer> {
  for (const part of parts) {
    for (let at = 0; at < part.length; at += SLICE_BYTES) {
      yield part.subarray(at, at + SLICE_BYTES);
      await new Promise<void>((r) => setImmediate(r));
    }
  }
}

export interface ServeMetricsOptions {
  /** Default /metrics. */
  readonly path?: string;
}

/** Adds GET /metrics (no auth: Prometheus scrapes it; it holds no secrets). */
export function serveMetrics(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  app: FastifyInstance<any, any, any, any, any>,
  metrics: Pick<LlmgwMetrics, 'scrapeParts'>,
  opts: ServeMetricsOptions = {},
): void {
  app.get(opts.path ?? '/metrics', async (_req, reply) => {
    const { contentType, parts } = await metrics.scrapeParts();
    const length = parts.reduce((n, p) => n + p.length, 0);
    return reply
      .header('content-type', contentType)
      .header('cache-control', 'no-store')
      .header('content-length', length)
      .send(Readable.from(slices(parts), { objectMode: false }));
  });
}
