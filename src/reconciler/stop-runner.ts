/**
 * The stops the reconciler runs (I/O), each in the background: the stop sequence of stops.ts —
 * drain, then SIGTERM, stop_grace, SIGKILL — for every stop in the record, with its progress shown
 * in the snapshot. A stop never holds up a pass or its publication.
 */
import type { Logger } from 'pino';
import { stopGroupWorkers } from './group-workers.js';
import { reasonOf } from '../errors/catalogue.js';
import { nodeTimers, type LoopTimers } from './loop.js';
import type { ShellPorts } from './shell-ports.js';
import type { BeforeStop } from './slot-donor.js';
import { routersBehind, type RoutingAcks } from './routing-acks.js';
import { drainStep, stopFinished, stopIds, stopOf, type InFlight } from './stops.js';
import type { StopProgress } from './summarize.js';

/** How often a draining replica is asked what it has in flight. */
export const DRAIN_PROBE_MS = 250;

export class StopRunner {
  /** Stops this process runs (stops.ts: drain, then SIGTERM…), in the background. */
  private readonly ops = new Map<string, Promise<void>>();
  private readonly stopProgress = new Map<string, StopProgress>();

  constructor(
    private readonly p: ShellPorts,
    /** What a replica has in flight (its GET /slots). */
    private readonly inFlight: (endpoint: string) => Promise<InFlight>,
    private readonly timers: LoopTimers | undefined,
    /** The routers: whether this instance's own snapshot has the replica out of routing, and the other routers (HA; null: none). */
    private readonly routing: { readonly localOut: (model: string, replica: string) => boolean; readonly acks: RoutingAcks | null },
    /** After the drain, before the replica is stopped (#38 item 3: an idle replica's slots saved; slot-donor.ts). */
    private readonly beforeStop?: BeforeStop,
  ) {}

  /** The replicas whose stop runs now. */
  ids(): ReadonlySet<string> {
    return new Set(this.ops.keys());
  }

  has(id: string): boolean {
    return this.ops.has(id);
  }

  /** The stops running now, to be awaited. */
  running(): Promise<void>[] {
    return [...this.ops.values()];
  }

  /** Each running stop's phase and in-flight count, as the snapshot shows them. */
  progress(): ReadonlyMap<string, StopProgress> {
    return this.stopProgress;
  }

  /** Runs every stop in the record that does not run yet; after a pass's starts are launched. */
  async launchAll(log: Logger): Promise<void> {
    // Every stop in the record runs in the background (this pass's, and those a previous leader or
    // run left unfinished): stopping replicas leave the router's view at once, and no stop holds up
    // the pass or the publication of what it started.
    const toLaunch = stopIds(this.p.record()).filter((id) => !this.ops.has(id));
    if (toLaunch.length === 0 || !this.p.leader()) return;
    // The record first (the state file, or etcd): a failover right after continues these drains from
    // their start instead of planning them anew.
    await this.p.saveState();
    let launched = false;
    for (const id of toLaunch) {
      const rec = stopOf(this.p.record(), id);
      if (!rec || this.ops.has(id) || !this.p.leader()) continue;
      // One 'stopping replica' line a stop: here for one that drains first (out of routing now), from
      // the stop's own first step for one that does not (stops.ts drainStep).
      if (rec.drain) log.info({ model: rec.model, node: rec.node, replica: id, reason: rec.reason, drain: true }, 'stopping replica');
      this.launch(id, log);
      launched = true;
    }
    if (launched) this.p.publish();
  }

  /** Sleeps on the loop's timers (fake ones in tests); resolves early when the controller stops. */
  private sleep(ms: number): Promise<void> {
    const timers = this.timers ?? nodeTimers;
    const signal = this.p.stopSignal();
    return new Promise((resolve) => {
      const done = (): void => {
        timers.clearTimeout(t);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const t = timers.setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private endpointOf(node: string, id: string): string {
    return this.p.nodes.states.get(node)?.obs?.replicas.find((r) => r.id === id)?.endpoint ?? '';
  }

  private setStopProgress(id: string, p: StopProgress): void {
    const was = this.stopProgress.get(id);
    this.stopProgress.set(id, p);
    if (was?.phase !== p.phase || was?.inFlight !== p.inFlight) this.p.publish();
  }

  /**
   * One stop (stops.ts): out of routing already (the record), then wait for the replica's in-flight
   * requests (bounded by drain_grace from the record's start), then SIGTERM, stop_grace, SIGKILL. It
   * gives up, leaving the record, when this controller stops or stops leading: the next leader
   * continues it.
   */
  private launch(id: string, log: Logger): void {
    const signal = this.p.stopSignal();
    const op = (async () => {
      // when the last look found nothing in flight with every router routing without the replica
      let quietSince: number | null = null;
      for (;;) {
        const seen = stopOf(this.p.record(), id);
        const spec = this.p.spec();
        if (!seen || !spec || signal.aborted || !this.p.leader()) return;
        // the routers first, then /slots: a zero counts only from a probe sent once they had the replica out
        let behind: string[] = [];
        let routers = 0;
        if (seen.drain) {
          const acks = this.routing.acks;
          const others = acks ? { outAt: acks.outAt(seen.model, id), routers: await acks.routers() } : null;
          behind = routersBehind(this.routing.localOut(seen.model, id), others);
          routers = others?.routers?.length ?? 0;
        }
        const inFlight: InFlight = seen.drain ? await this.inFlight(this.endpointOf(seen.node, id)) : 'gone';
        const count = typeof inFlight === 'number' ? inFlight : null;
        // the time first, then the record: taking the time applies a wall-clock step to the record,
        // and a drain start read before it would be judged against the stepped clock (cut at once)
        const now = this.p.now(log);
        const rec = stopOf(this.p.record(), id);
        if (!rec) return;
        const step = drainStep(id, rec, { inFlight, behind, routers, quietSince }, now, spec.settings.drainGraceMs);
        if (step.kind === 'wait') {
          quietSince = step.quietSince;
          this.setStopProgress(id, { phase: 'draining', inFlight: count });
          await this.sleep(DRAIN_PROBE_MS);
          continue;
        }
        if (signal.aborted || !this.p.leader()) return;
        this.p.logNotes(log, [step.note]);
        this.setStopProgress(id, { phase: 'stopping', inFlight: count });
        const n = spec.nodes[rec.node];
        if (n && this.beforeStop) await this.beforeStop({ model: rec.model, node: rec.node, replica: id, reason: rec.reason }, log).catch(() => undefined);
        try {
          const grace = rec.reason === 'failed' ? 0 : spec.settings.stopGraceMs;
          if (n) await this.p.nodes.driver(n).stopReplica(id, grace);
          // an RPC group's workers go with its head (#40)
          const group = this.p.record().replicas[id]?.group;
          if (group) await stopGroupWorkers(group, (node) => (spec.nodes[node] ? this.p.nodes.driver(spec.nodes[node]) : undefined), log, grace);
          this.p.nodes.forgetReplica(rec.node, id);
          this.p.setRecord(stopFinished(this.p.record(), id));
          await this.p.saveState();
          // gone from the snapshot now, not when the next pass ends (it may wait behind a long one):
          // what lists replicas (ctl, the admin API, the page) stops offering one that is gone
          this.p.publish();
        } catch (e) {
          log.warn({ replica: id, node: rec.node, code: reasonOf(e).code, err: reasonOf(e).message }, 'stopping replica failed; retried next pass');
        }
        return;
      }
    })().finally(() => {
      this.ops.delete(id);
      this.stopProgress.delete(id);
      // The world changed under the stop: look again (restarts go on, freed room gets used).
      if (!signal.aborted) void this.p.requestPass('stop-finished');
    });
    this.ops.set(id, op);
  }
}
