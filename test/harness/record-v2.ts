/**
 * Table tests written against the record's facts by replica id (the version-2 maps) keep their
 * meaning on the entity-shaped record: `fromV2` builds a record from those facts through the real
 * migration (state-migrate.ts), and `asV2` reads them back from a record, so an assertion says the
 * same thing it said before the record changed shape.
 */
import type { ModelHealth } from '../../src/reconciler/health.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';

export interface StartV2 {
  readonly model: string;
  readonly node: string;
  readonly digest: string;
  readonly startedAt: number;
  readonly readyAt?: number;
  readonly endpoint?: string;
}
export interface StopV2 {
  readonly model: string;
  readonly node: string;
  readonly reason: string;
  readonly since: number;
  readonly drain: boolean;
}

export interface V2 {
  readonly appliedRevision: string | null;
  readonly models: Readonly<Record<string, ModelHealth>>;
  readonly starts: Readonly<Record<string, StartV2>>;
  readonly demand: Readonly<Record<string, number>>;
  readonly restarts: Readonly<Record<string, number>>;
  readonly draining: Readonly<Record<string, number>>;
  readonly stops: Readonly<Record<string, StopV2>>;
  readonly readySince: Readonly<Record<string, number>>;
  readonly unresponsiveSince: Readonly<Record<string, number>>;
  readonly accounted: Readonly<Record<string, number>>;
  readonly avoid: Readonly<Record<string, number>>;
  readonly handledRetries: readonly string[];
  readonly retriesTrimmed: number;
}

/** A record from version-2 facts (the rest empty), through the real migration. */
export function fromV2(f: Partial<V2>): ControllerState {
  return stateFromJson({ version: 2, models: {}, handledRetries: [], ...f });
}

/** The record with some version-2 facts laid over it (the facts it names replace the record's of that kind). */
export function withV2(s: ControllerState, f: Partial<V2>): ControllerState {
  return fromV2({ ...asV2(s), ...f });
}

/** The record's facts as the version-2 maps held them. */
export function asV2(s: ControllerState): V2 {
  const out = {
    appliedRevision: s.appliedRevision,
    models: {} as Record<string, ModelHealth>,
    starts: {} as Record<string, StartV2>,
    demand: {} as Record<string, number>,
    restarts: {} as Record<string, number>,
    draining: {} as Record<string, number>,
    stops: {} as Record<string, StopV2>,
    readySince: {} as Record<string, number>,
    unresponsiveSince: {} as Record<string, number>,
    accounted: {} as Record<string, number>,
    avoid: {} as Record<string, number>,
    handledRetries: s.handledRetries,
    retriesTrimmed: s.retriesTrimmed,
  };
  for (const [name, m] of Object.entries(s.models)) {
    out.models[name] = m.health;
    if (m.demand !== undefined) out.demand[name] = m.demand;
    for (const [node, until] of Object.entries(m.avoid ?? {})) out.avoid[`${name}@${node}`] = until;
  }
  for (const [id, r] of Object.entries(s.replicas)) {
    const p = r.phase;
    if (p.kind === 'launching') out.starts[id] = { model: r.model, node: r.node, digest: r.digest, startedAt: r.startedAt };
    if (p.kind === 'ready' && !p.seen) out.starts[id] = { model: r.model, node: r.node, digest: r.digest, startedAt: r.startedAt, readyAt: p.since, ...(p.endpoint ? { endpoint: p.endpoint } : {}) };
    if (p.kind === 'ready' && p.seen) out.readySince[id] = p.since;
    if (p.kind === 'unready' && p.since !== undefined) out.unresponsiveSince[id] = p.since;
    if (p.kind === 'leaving' && p.why === 'surge') out.draining[id] = p.since;
    if (p.kind === 'leaving' && p.why === 'stop') out.stops[id] = { model: r.model, node: r.node, reason: p.reason, since: p.since, drain: p.drain };
    if (r.restartAsked !== undefined) out.restarts[id] = r.restartAsked;
    if (r.counted !== undefined) out.accounted[id] = r.counted;
  }
  return out;
}

export { emptyState };
