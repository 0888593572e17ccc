/**
 * What every admin route group is given (app.ts builds it once), and the small pieces they share. A
 * group is a function of (its fastify scope, this context) that declares its routes; app.ts registers
 * each as a fastify plugin under /admin/v1, behind the token check, and owns the hooks and the one
 * error handler. A route validates its input (schema), makes one backend call and shapes the reply.
 */
import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import type { AdminBackend } from '../backend.js';
import type { AdminLimits } from '../limits.js';
import type { UsageQuery } from '../../router/usage-book.js';
import type { UsageRow } from '../../wire/usage.js';

/** The router's usage book as GET /usage reads it. */
export interface UsageSource {
  query(q: UsageQuery): UsageRow[];
}

export interface AdminRouteContext {
  readonly backend: AdminBackend;
  readonly limits: AdminLimits;
  readonly log: FastifyBaseLogger | undefined;
  /** A model name or alias → its canonical name; throws NO_VALID_SPEC / NOT_FOUND. */
  readonly canonicalModel: (name: string) => string;
  /** "the fleet in force (revision abc…)", for messages. */
  readonly whatSpec: () => string;
  /** The router's usage per key × model; null: GET /usage answers no rows. */
  readonly usage: UsageSource | null;
  /** Aborted when the app closes: a waiting request answers at once. */
  readonly closing: AbortSignal;
}

/** A group of admin routes. */
export type AdminRoutes = (api: FastifyInstance, ctx: AdminRouteContext) => void;

/** Longest model name, alias or replica id a route takes. */
export const MAX_NAME = 256;

/** `:name` of a model route. */
export const nameParams = { type: 'object', properties: { name: { type: 'string', minLength: 1, maxLength: MAX_NAME } } } as const;

/** Every admin answer is about now: no cache keeps it. */
export const noStore = (reply: FastifyReply): FastifyReply => reply.header('cache-control', 'no-store');
