/**
 * GET /admin/v1/usage?since=&key=&model= — requests, errors, tokens and the p50 latency per key ×
 * model, from the router's usage book (src/router/usage-book.ts). `since`: an ISO 8601 time or a
 * duration back from now (`15m`, `24h`); counted by whole minutes (the minute `since` falls in
 * included). Keys are named by their name in access/keys.yaml, never their value.
 */
import type { FastifyInstance } from 'fastify';
import { LlmgwError } from '../../errors/catalogue.js';
import { parseDuration } from '../../fleet-spec/units.js';
import type { UsageJson, UsageRow } from '../../wire/usage.js';
import type { AdminRoutes, UsageSource } from './context.js';

export type { UsageSource } from './context.js';

export type { UsageJson } from '../../wire/usage.js';

/** `since` → Date.now() milliseconds; throws ADMIN_BAD_REQUEST. */
export function parseSince(since: string, now: number): number {
  if (/^\d{4}-\d\d-\d\d/.test(since)) {
    const t = Date.parse(since);
    if (Number.isFinite(t)) return t;
  } else {
    const ms = parseDuration(since);
    if (ms !== null) return now - ms;
  }
  throw new LlmgwError('ADMIN_BAD_REQUEST', `since must be an ISO 8601 time (2026-12-01T10:00:00Z) or a duration back from now (15m, 24h); got ${JSON.stringify(since.slice(0, 100))}.`);
}

export function registerUsageRoute(api: FastifyInstance, source: UsageSource | null, now: () => number = Date.now): void {
  api.get<{ Querystring: { since?: string; key?: string; model?: string } }>(
    '/usage',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { since: { type: 'string', maxLength: 64 }, key: { type: 'string', maxLength: 256 }, model: { type: 'string', maxLength: 256 } },
        },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const since = q.since === undefined ? 0 : parseSince(q.since, now());
      const rows = source === null ? [] : source.query({ since, ...(q.key !== undefined ? { key: q.key } : {}), ...(q.model !== undefined ? { model: q.model } : {}) });
      const body: UsageJson = { since: since === 0 ? null : new Date(Math.floor(since / 60_000) * 60_000).toISOString(), rows };
      return reply.header('cache-control', 'no-store').send(body);
    },
  );
}

/** GET /usage on the admin API: the router's book of this instance. */
export const usageRoutes: AdminRoutes = (api, ctx) => registerUsageRoute(api, ctx.usage);
