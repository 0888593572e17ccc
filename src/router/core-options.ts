/**
 * What a RouterCore (core.ts) is made of: its fleet, metrics and limits, and the optional parts
 * (usage rows, the per-key limits' clock and router count, the canary figures, the hot prefixes).
 */
import type { RouterMetrics } from '../metrics/ports.js';
import type { FleetView } from '../reconciler/view.js';
import type { HotPrefixes } from './hot-prefixes.js';
import type { RouterCount } from './limits.js';
import type { RouterRollouts } from './rollout-figures.js';
import type { UpstreamTimeouts } from './upstreams.js';
import type { UsageSink } from './usage.js';

export interface CoreLimits extends UpstreamTimeouts {
  /** Largest request body accepted (413 above). */
  readonly bodyBytes: number;
  /** Most requests in handle() at once (body, activation wait, proxying); 503 ROUTER_OVERLOADED above. */
  readonly maxInFlight: number;
  /** Most bytes held at once over those requests (bodies; answers held to redact them); 503 ROUTER_OVERLOADED above. */
  readonly maxBufferedBytes: number;
}

/** Where the warnings and internal errors go (a pino logger fits). */
export interface CoreLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** What a RouterCore is made of (app.ts builds it; the benchmarks too). */
export interface RouterCoreOptions {
  readonly fleet: FleetView;
  readonly metrics: RouterMetrics;
  readonly limits: CoreLimits;
  /** Requests need an API key (access/keys.yaml). */
  readonly authRequired: boolean;
  readonly log?: CoreLog | null;
  /** Where each request's usage row goes (null: not recorded). */
  readonly usage?: UsageSink | null;
  /** Wall clock for the per-key limits and the canary windows (Date.now). */
  readonly clock?: () => number;
  /** The routers sharing the per-key limits (1: this one alone). */
  readonly routers?: () => RouterCount;
  readonly rollouts?: RouterRollouts;
  /** The models' hot prefixes, for a new replica's warm-up (hot-prefixes.ts); null: not kept. */
  readonly hot?: HotPrefixes | null;
}
