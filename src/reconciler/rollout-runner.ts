/**
 * Runs a rollout's checks (rollout-life.ts) against the new revision's first ready replica, in the
 * background: one run per model and revision at a time, never holding up a pass. The replica takes
 * no user request meanwhile (the snapshot shows it starting). Its result is a transition of the
 * record (checksConcluded), saved, and a pass follows: held → the replica drains and stops; passed →
 * the stable replicas are replaced surge-first. A run whose revision is no longer the one under test
 * when it ends (a newer push, a retry) changes nothing; a controller restart or failover runs the
 * checks again (the phase is in the record).
 */
import type { Logger } from 'pino';
import { reasonOf, type ReasonRef } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { runChecks } from '../rollout/check.js';
import type { CheckResult, RolloutCheck } from '../rollout/types.js';
import { checksConcluded } from './rollout-life.js';
import type { CanarySteps } from './canary-steps.js';
import type { ShellPorts } from './shell-ports.js';
import { withModel } from './state.js';

/** Runs the checks in order against one replica, stopping at the first failure. */
export type ChecksRun = (endpoint: string, engineApiKey: string, checks: readonly RolloutCheck[], opts: { readonly signal?: AbortSignal }) => Promise<readonly CheckResult[]>;

/** The first failure's reason, or null when every check passed. */
export function checksVerdict(results: readonly CheckResult[]): ReasonRef | null {
  for (const r of results) if (!r.ok) return r.reason;
  return null;
}

export class RolloutRunner {
  /** "model@digest" of the runs in flight. */
  private readonly runs = new Map<string, Promise<void>>();

  constructor(
    private readonly p: ShellPorts,
    private readonly o: { readonly engineApiKey: string; readonly canary: Pick<CanarySteps, 'begin'>; readonly run?: ChecksRun },
  ) {}

  /** The runs in flight (the controller waits for them when it stops). */
  running(): Promise<void>[] {
    return [...this.runs.values()];
  }

  /** Starts the checks of every rollout whose new revision has a ready replica and no run yet. After a pass. */
  launchAll(spec: FleetSpec, log: Logger): void {
    if (!this.p.leader()) return;
    const s = this.p.record();
    for (const name in s.models) {
      const r = s.models[name]!.rollout;
      const rollout = spec.models[name]?.rollout;
      // a canary without checks passes them at once, once its replica is ready
      if (r?.phase !== 'checking' || !rollout || (rollout.checks.length === 0 && !rollout.canary) || spec.models[name]!.digest !== r.digest) continue;
      const checks = rollout.checks;
      const key = `${name}@${r.digest}`;
      if (this.runs.has(key)) continue;
      const endpoint = this.readyEndpoint(name, r.digest);
      if (endpoint === null) continue;
      const run = this.check(name, r.digest, endpoint, checks, log.child({ model: name, digest: r.digest })).finally(() => this.runs.delete(key));
      this.runs.set(key, run);
    }
  }

  /** Where a ready replica of the revision answers (the record's ready start, or a look's), or null. */
  private readyEndpoint(model: string, digest: string): string | null {
    const s = this.p.record();
    for (const id in s.replicas) {
      const x = s.replicas[id]!;
      if (x.model !== model || x.digest !== digest || x.phase.kind !== 'ready') continue;
      const seen = this.p.nodes.states.get(x.node)?.obs?.replicas.find((o) => o.id === id);
      if (seen?.state === 'ready' && seen.endpoint) return seen.endpoint;
      if (!x.phase.seen && x.phase.endpoint) return x.phase.endpoint;
    }
    return null;
  }

  private async check(model: string, digest: string, endpoint: string, checks: readonly RolloutCheck[], log: Logger): Promise<void> {
    log.info({ checks: checks.map((c) => c.name), endpoint }, 'rollout: running the new revision\'s checks');
    let failed: ReasonRef | null;
    try {
      failed = checksVerdict(await (this.o.run ?? runChecks)(endpoint, this.o.engineApiKey, checks, { signal: this.p.stopSignal() }));
    } catch (e) {
      // the runner itself failed (not a check): nothing is decided; the next pass runs them again
      log.warn({ code: reasonOf(e).code, err: reasonOf(e).message }, 'rollout: the checks could not run; tried again next pass');
      return;
    }
    if (this.p.stopSignal().aborted || !this.p.leader()) return;
    const now = this.p.now(log);
    const s = this.p.record();
    const m = s.models[model];
    const canary = this.p.spec()?.models[model]?.rollout?.canary ?? null;
    const next = checksConcluded(m?.rollout, digest, failed, now, canary !== null);
    if (!m || next === m.rollout) return;
    this.p.setRecord(withModel(s, model, { ...m, ...(next ? { rollout: next } : {}) }));
    if (next?.phase === 'canary') this.o.canary.begin(model, next.digest, next.since);
    if (failed) log.error({ code: failed.code, reason: failed.message }, 'rollout held: a check failed; the stable revision keeps serving');
    else if (next?.phase === 'canary') log.info({ steps: canary!.steps, intervalMs: canary!.intervalMs }, 'rollout: checks passed; the canary takes its first step');
    else log.info('rollout: checks passed; the new revision replaces the stable one');
    await this.p.saveState();
    this.p.publish();
    void this.p.requestPass('rollout-checked');
  }
}
