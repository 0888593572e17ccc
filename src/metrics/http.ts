/** `/metrics` on a Fastify app (the admin port, or a port of its own). */
import type { FastifyInstance } from 'fastify';
import type { LlmgwMetrics } from './registry.js';

export interface ServeMetricsOptions {
  /** Default /metrics. */
  readonly path?: string;
}

/** Adds GET /metrics (no auth: Prometheus scrapes it; it holds no secrets). */
export function serveMetrics(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  app: FastifyInstance<any, any, any, any, any>,
  metrics: Pick<LlmgwMetrics, 'scrape'>,
  opts: ServeMetricsOptions = {},
): void {
  app.get(opts.path ?? '/metrics', async (_req, reply) => {
    const { contentType, body } = await metrics.scrape();
    return reply.header('content-type', contentType).header('cache-control', 'no-store').send(body);
  });
}
