/**
 * The specs of the stable revisions of unpromoted rollouts (shell, #34): read from the fleet repo
 * at the rollout's `stableRevision` in the background, kept while a rollout needs them, dropped
 * after. A read that fails is logged once with its reason and tried again a minute later; until it
 * succeeds the stable revision is only kept, not started again (stable-replicas.ts).
 */
import type { Logger } from 'pino';
import { reasonOf } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { ControllerState } from './state.js';

/** Reads the spec at a fleet revision (SpecTracker.specAt). */
export type SpecAt = (revision: string) => Promise<FleetSpec>;

const RETRY_MS = 60_000;

/** The stable revisions the record's unpromoted rollouts name. */
export function stableRevisions(s: ControllerState): Set<string> {
  const out = new Set<string>();
  for (const name in s.models) {
    const r = s.models[name]!.rollout;
    if (r?.stableRevision !== undefined && r.phase !== 'promoted') out.add(r.stableRevision);
  }
  return out;
}

export class StableSpecs {
  private readonly specs = new Map<string, FleetSpec>();
  private readonly loading = new Set<string>();
  /** Revisions whose read failed: when it may be tried again. */
  private readonly failedUntil = new Map<string, number>();

  constructor(
    private readonly specAt: SpecAt | undefined,
    private readonly loaded: () => void,
  ) {}

  /** The specs the record's rollouts need, by revision; those missing are read in the background (a pass follows). */
  wanted(s: ControllerState, now: number, log: Logger): ReadonlyMap<string, FleetSpec> {
    const need = stableRevisions(s);
    for (const rev of this.specs.keys()) if (!need.has(rev)) this.specs.delete(rev);
    for (const rev of this.failedUntil.keys()) if (!need.has(rev)) this.failedUntil.delete(rev);
    if (this.specAt) for (const rev of need) if (!this.specs.has(rev) && !this.loading.has(rev) && (this.failedUntil.get(rev) ?? 0) <= now) this.read(this.specAt, rev, now, log);
    return this.specs;
  }

  /** The spec that defines this revision of the model, among those read. */
  forDigest(model: string, digest: string): FleetSpec | undefined {
    for (const spec of this.specs.values()) if (spec.models[model]?.digest === digest) return spec;
    return undefined;
  }

  private read(specAt: SpecAt, rev: string, now: number, log: Logger): void {
    this.loading.add(rev);
    specAt(rev).then(
      (spec) => {
        this.specs.set(rev, spec);
        this.failedUntil.delete(rev);
        log.info({ revision: rev }, 'rollout: the stable revision\'s spec is read; its replicas can start again');
        this.loaded();
      },
      (e: unknown) => {
        const r = reasonOf(e);
        this.failedUntil.set(rev, now + RETRY_MS);
        log.error({ revision: rev, code: r.code, err: r.message }, 'rollout: the stable revision\'s spec cannot be read; a stable replica that goes is not started again until it can');
      },
    ).finally(() => this.loading.delete(rev));
  }
}
