/**
 * What a Reconciler does for the router and the operators (ControllerActs, controller-shell.ts):
 * demand and activity from requests, `ctl retry`, `ctl rollout promote|abort`, `ctl restart` and
 * log reads. Each changes the record with one transition and asks for a pass; nothing here acts on
 * a node but the log read.
 */
import { randomBytes } from 'node:crypto';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { demandResultOf } from './availability.js';
import type { RolloutOverride, RolloutOverridden } from './controller-api.js';
import type { ControllerActs } from './controller-shell.js';
import type { Unplaceable } from './placement.js';
import { rolloutOverridden } from './rollout-life.js';
import type { ShellPorts } from './shell-ports.js';
import { demanded, restartRequested, retryHandled } from './state.js';
import { DEMAND_START } from './loop.js';
import { stopOf } from './stops.js';
import { rolloutView } from './summarize.js';
import { rangeNow, scales } from '../scale/range.js';
import type { DemandResult, FleetSnapshot, ModelView } from './view.js';

/** A model's requests ask for a look at its load at most this often (ms). */
const LOAD_LOOK_MS = 1000;

/** Requests' demand reaches the state file at most this often (a write carries the latest). */
const DEMAND_SAVE_MS = 1000;

/** What the acts need of the Reconciler beyond the ports: its view and its last look. */
export interface ActsPorts extends ShellPorts {
  snapshot(): FleetSnapshot;
  model(name: string): ModelView | null;
  /** Whether this process runs the replica's stop now. */
  stopping(replicaId: string): boolean;
  /** A fresh placement against the current view (pass.ts freshPlacement); 'pass' before the first look. */
  placeNow(model: string): 'pass' | 'start' | Unplaceable | null;
  /** The model's unplaceable reason as the last look found it. */
  unplaceable(model: string): Unplaceable | undefined;
  /** Shows a fresh placement's reason in the snapshot now (no pass). */
  showUnplaceable(model: string, u: Unplaceable): void;
}

export class ReconcilerActs implements ControllerActs {
  /** Requests in this process's router per model (FleetView.hold): activity until they end. */
  private readonly held = new Map<string, number>();
  /** A write of the record that a request's demand asked for, pending. */
  private demandSave: NodeJS.Timeout | null = null;
  /** When a request last asked for a pass to look at its model's load (#42), by model. */
  private readonly loadLooks = new Map<string, number>();

  constructor(private readonly p: ActsPorts) {}

  /** Models with requests in this process's router now. */
  active(): ReadonlySet<string> {
    return new Set(this.held.keys());
  }

  /** Drops a pending demand write (the controller stops and writes the record itself). */
  stop(): void {
    if (this.demandSave) clearTimeout(this.demandSave);
    this.demandSave = null;
  }

  spec(): FleetSpec | null {
    return this.p.spec();
  }

  requestPass(trigger: string): Promise<void> {
    return this.p.requestPass(trigger);
  }

  private specModel(name: string): ModelSpec {
    const spec = this.spec();
    const model = spec?.modelNames[name];
    if (!spec || !model) throw new LlmgwError('NOT_FOUND', `No model named "${name}" in the fleet in force.`, { model: name });
    return spec.models[model]!;
  }

  /** `llmgw ctl retry MODEL`: unparks a parked model, or clears the backoff of one that is not. */
  async retry(name: string): Promise<{ model: string; outcome: 'unparked' | 'backoff-cleared' }> {
    const m = this.specModel(name);
    const now = this.p.now(); // before the record is read: taking the time may shift it for a clock step
    const h = retryHandled(this.p.record(), m, `admin:${now}:${randomBytes(3).toString('hex')}`, now);
    this.p.setRecord(h.state);
    this.p.logNotes(this.p.log, [h.note]);
    await this.requestPass('admin-retry');
    return { model: m.name, outcome: h.outcome === 'already-handled' ? 'backoff-cleared' : h.outcome };
  }

  /**
   * `llmgw ctl rollout promote|abort MODEL`: the operator's word over the verdict (rollout-life.ts
   * rolloutOverridden), written before it answers. Answers the rollout as the transition left it.
   */
  async overrideRollout(name: string, how: RolloutOverride, by: string): Promise<RolloutOverridden> {
    const m = this.specModel(name);
    const canary = m.rollout?.canary ?? null;
    const now = this.p.now(); // before the record is read: taking the time may shift it for a clock step
    const s = this.p.record();
    const before = s.models[m.name];
    const o = rolloutOverridden(before?.rollout, how, now, canary, by);
    if (o.outcome === 'no-rollout' || !before || !o.rollout) {
      throw new LlmgwError('ROLLOUT_NONE', `${m.name} has no rollout to ${how}: revision ${m.digest.slice(0, 12)} serves with none under test or held back`, { model: m.name });
    }
    const fields = { model: m.name, how, by, outcome: o.outcome, digest: o.rollout.digest, stable: o.rollout.stable, was: before.rollout?.phase, phase: o.rollout.phase };
    if (o.outcome === 'already') {
      this.p.log.info(fields, `rollout ${how}: nothing to do, the rollout was ${o.rollout.phase === 'promoted' ? 'promoted' : 'rolled back'} already`);
      return { model: m.name, outcome: 'already', rollout: rolloutView(o.rollout, canary) };
    }
    this.p.setRecord({ ...s, models: { ...s.models, [m.name]: { ...before, rollout: o.rollout } } });
    this.p.log.info(fields, how === 'promote' ? 'rollout promoted by an operator' : 'rollout aborted by an operator');
    await this.p.saveState();
    this.p.publish();
    await this.requestPass(`admin-rollout-${how}`);
    return { model: m.name, outcome: o.outcome, rollout: rolloutView(o.rollout, canary) };
  }

  /** `llmgw ctl restart`: replace replicas surge-first (by id, all of a model, or all). */
  async restart(req: { readonly replicas?: readonly string[]; readonly model?: string; readonly all?: boolean }): Promise<readonly string[]> {
    const model = req.model ? this.specModel(req.model).name : undefined;
    const ids: string[] = [];
    for (const r of this.p.snapshot().models.flatMap((mv) => mv.replicas)) {
      if (r.phase !== 'ready' && r.phase !== 'starting') continue;
      if (req.all || (model && r.model === model) || req.replicas?.includes(r.id)) ids.push(r.id);
    }
    for (const id of req.replicas ?? []) if (!ids.includes(id)) throw new LlmgwError('REPLICA_NOT_FOUND', `no running replica "${id}"`, { replica: id });
    const now = this.p.now(); // before the record is read: taking the time may shift it for a clock step
    this.p.setRecord(restartRequested(this.p.record(), ids, now));
    await this.p.saveState();
    await this.requestPass('admin-restart');
    return ids;
  }

  /**
   * Whether every replica of a restart request has been replaced: out of the record and out of the
   * published snapshot (so what `ctl status` shows next agrees: the record changes mid-pass, the
   * snapshot at its end).
   */
  restartDone(ids: readonly string[]): boolean {
    const shown = new Set(this.p.snapshot().models.flatMap((m) => m.replicas.map((r) => r.id)));
    return ids.every((id) => this.p.record().replicas[id]?.restartAsked === undefined && !shown.has(id));
  }

  async logs(replicaId: string, lines: number): Promise<string> {
    const r = this.p.snapshot().models.flatMap((m) => m.replicas).find((x) => x.id === replicaId);
    const node = r && this.spec()?.nodes[r.node];
    if (!r || !node) throw new LlmgwError('REPLICA_NOT_FOUND', `no replica "${replicaId}"`, { replica: replicaId });
    try {
      return await this.p.nodes.driver(node).logTail(replicaId, lines);
    } catch (e) {
      // A stop removes the replica's directory, its log with it, before the next snapshot stops
      // listing it: say that rather than only that the node has no such replica.
      const stopping = r.phase === 'draining' || r.phase === 'stopping' || stopOf(this.p.record(), replicaId) !== undefined || this.p.stopping(replicaId);
      if (!(e instanceof LlmgwError) || e.code !== 'REPLICA_NOT_FOUND' || !stopping) throw e;
      throw new LlmgwError('REPLICA_NOT_FOUND', `replica ${replicaId} of ${r.model} was being stopped and is gone from node ${r.node}: a stopped replica's log goes with it`, { ...e.detail, replica: replicaId, model: r.model, node: r.node });
    }
  }

  touch(model: string): void {
    // Only an on-demand model's idle timeout and eviction order read demand.
    if (this.spec()?.models[model]?.scaling.mode !== 'on_demand') return;
    const now = this.p.now(); // before the record is read: taking the time may shift it for a clock step
    this.p.setRecord(demanded(this.p.record(), model, now));
    // Demand survives a restart: the record is written at most once a second while requests come
    // (the write after the last one carries the last request's time).
    if (this.demandSave) return;
    this.demandSave = setTimeout(() => {
      this.demandSave = null;
      void this.p.saveState();
    }, DEMAND_SAVE_MS);
    this.demandSave.unref();
  }

  hold(model: string): () => void {
    this.touch(model);
    this.watchLoad(model);
    this.held.set(model, (this.held.get(model) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.held.get(model) ?? 1) - 1;
      if (n > 0) this.held.set(model, n);
      else this.held.delete(model);
      this.touch(model);
    };
  }

  /**
   * A request for a model whose count follows its load (#42): a pass looks at the load soon, unless
   * one is due anyway (the record's next look) or the model is at its max — at most once a second.
   */
  private watchLoad(model: string): void {
    const m = this.spec()?.models[model];
    if (!m || !scales(m)) return;
    const now = this.p.now();
    const rec = this.p.record().models[model]?.scale;
    if ((rec?.lookAt ?? -Infinity) > now || (rec?.count ?? 0) >= rangeNow(m, now).max) return;
    if (now - (this.loadLooks.get(model) ?? -Infinity) < LOAD_LOOK_MS) return;
    this.loadLooks.set(model, now);
    void this.requestPass('load');
  }

  async demand(model: string): Promise<DemandResult> {
    this.touch(model);
    const fresh = this.p.placeNow(model);
    if (fresh === 'pass' || fresh === 'start') {
      // a start and nothing else: a pass that starts it on the last look (#38), without the sync and
      // the look of every node first (when a pass runs already, the next pass is a whole one)
      await this.requestPass(fresh === 'start' ? DEMAND_START : 'demand');
      return demandResultOf(this.p.model(model));
    }
    if (fresh) {
      // Unplaceable on the current view: answered now, no pass (nothing would start).
      if (this.p.unplaceable(model)?.reason !== fresh.reason) this.p.showUnplaceable(model, fresh);
      return { kind: 'unplaceable', code: fresh.code, reason: fresh.reason };
    }
    return demandResultOf(this.p.model(model));
  }
}
