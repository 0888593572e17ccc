/**
 * A recording fake NodeDriver, a fake clock and fake timers: enough to drive the whole reconciler
 * shell in a unit test, in well under a second of real time. Replicas of the models named in
 * `failing` die on the node at once and their waitReady rejects a few ticks later (the window in
 * which a pass can see the dead replica before the start reports); others become ready.
 */
import { LlmgwError } from '../../src/errors/catalogue.js';
import type { NodeDriver, NodeObservation, ReplicaObservation, ReplicaStartSpec } from '../../src/nodes/driver.js';
import type { LoopTimers } from '../../src/reconciler/loop.js';

/** A wall clock and a monotonic one: `advance` moves both (time passes), `step` only the wall clock. */
export class FakeClock {
  mono = 0;
  constructor(public t = 1_000_000) {}
  readonly now = (): number => this.t;
  readonly monotonic = (): number => this.mono;
  advance(ms: number): void {
    this.t += ms;
    this.mono += ms;
  }
  step(ms: number): void {
    this.t += ms;
  }
}

/** setTimeout/setInterval against a FakeClock: nothing fires until the test advances time. */
export class FakeTimers implements LoopTimers {
  private seq = 0;
  private readonly due = new Map<number, { at: number; fn: () => void; every: number | null }>();
  constructor(private readonly clock: FakeClock) {}
  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.due.set(id, { at: this.clock.mono + ms, fn, every: null });
    return id;
  }
  clearTimeout(t: unknown): void {
    this.due.delete(t as number);
  }
  setInterval(fn: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.due.set(id, { at: this.clock.mono + ms, fn, every: ms });
    return id;
  }
  clearInterval(t: unknown): void {
    this.due.delete(t as number);
  }
  /** Fires every timer due by now (intervals re-armed). Timers run on real (monotonic) time, as node's do. */
  fire(): number {
    let n = 0;
    for (const [id, t] of [...this.due.entries()].sort((a, b) => a[1].at - b[1].at)) {
      if (t.at > this.clock.mono) continue;
      if (t.every === null) this.due.delete(id);
      else t.at += t.every;
      t.fn();
      n++;
    }
    return n;
  }
  /** When the next timer is due, or null. */
  next(): number | null {
    let at: number | null = null;
    for (const t of this.due.values()) if (at === null || t.at < at) at = t.at;
    return at;
  }
}

export const ticks = async (n: number): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
};

export interface StartRecordEntry {
  readonly id: string;
  readonly model: string;
  readonly node: string;
  /** Wall clock, and monotonic (real time passed). */
  readonly at: number;
  readonly mono: number;
}

/** What every fake node of one fleet saw, shared. */
export class FakeFleetLog {
  readonly starts: StartRecordEntry[] = [];
  /** When each failed start's failure was reported (waitReady rejected). */
  readonly failures: { id: string; model: string; at: number; mono: number }[] = [];
  /** Starts launched and not yet concluded, per model, and the highest that ever was. */
  readonly inFlight = new Map<string, number>();
  readonly maxInFlight = new Map<string, number>();
  startsOf(model: string): StartRecordEntry[] {
    return this.starts.filter((s) => s.model === model);
  }
}

export class FakeNode implements NodeDriver {
  readonly replicas = new Map<string, ReplicaObservation>();
  unreachable = false;

  constructor(
    readonly node: string,
    private readonly clock: FakeClock,
    private readonly log: FakeFleetLog,
    private readonly failing: ReadonlySet<string>,
    /** Ticks between a failing replica's death and its start reporting it. */
    private readonly reportAfterTicks = 5,
    /** Time an observation or a stop takes (the clocks advance by it): due times can pass during a pass. */
    private readonly observeMs = 0,
    /**
     * Over ssh, a look and a launch take time. lookTicks: between a look reading the node's replicas
     * and its answer arriving (what happens on the node meanwhile is not in it; 0: read on return).
     * launchTicks: before a launched replica is on the node.
     */
    private readonly ssh: { readonly lookTicks: number; readonly launchTicks: number } = { lookTicks: 0, launchTicks: 0 },
  ) {}

  /** While set, an observation waits for it (a slow node: the pass stays in its look). */
  observeGate: Promise<void> | null = null;

  /** Looks taken so far. */
  observes = 0;

  async observe(): Promise<NodeObservation> {
    this.observes++;
    if (this.observeGate) await this.observeGate;
    const at = this.clock.t;
    const read = this.ssh.lookTicks > 0 ? [...this.replicas.values()] : null;
    await ticks(1 + this.ssh.lookTicks);
    this.clock.advance(this.observeMs);
    if (this.unreachable) throw new LlmgwError('NODE_UNREACHABLE', `${this.node} is down`);
    return {
      node: this.node,
      at: read ? at : this.clock.t,
      memory: { totalBytes: 64 * 2 ** 30, availableBytes: 32 * 2 ** 30 },
      cpus: 4,
      cpuFlags: [],
      arch: 'x86_64',
      diskFreeBytes: 2 ** 40,
      engines: [],
      models: [],
      replicas: read ?? [...this.replicas.values()],
    };
  }
  async ensureEngine(): Promise<{ binary: string }> {
    return { binary: '/opt/llama-server' };
  }
  async ensureModel(_source: string, sha256: string): Promise<{ path: string; bytes: number }> {
    return { path: `/data/models/${sha256}.gguf`, bytes: 1 };
  }
  async startReplica(spec: ReplicaStartSpec): Promise<{ id: string; port: number; pid: number; endpoint: string; startedAt: number }> {
    await ticks(this.ssh.launchTicks);
    this.log.starts.push({ id: spec.id, model: spec.model, node: this.node, at: this.clock.t, mono: this.clock.mono });
    const n = (this.log.inFlight.get(spec.model) ?? 0) + 1;
    this.log.inFlight.set(spec.model, n);
    this.log.maxInFlight.set(spec.model, Math.max(n, this.log.maxInFlight.get(spec.model) ?? 0));
    const fails = this.failing.has(spec.model);
    this.replicas.set(spec.id, {
      id: spec.id,
      model: spec.model,
      digest: spec.digest,
      port: 20000 + this.replicas.size,
      pid: 1000 + this.log.starts.length,
      startedAt: this.clock.t,
      endpoint: `http://${this.node}:20000/${spec.id}`,
      state: fails ? 'failed' : 'starting',
      ...(fails ? { failure: { code: 'REPLICA_UNKNOWN_ARCHITECTURE' as const, message: "unknown model architecture: 'kev'", logTail: '' } } : {}),
    });
    return { id: spec.id, port: 20000, pid: 1000, endpoint: `http://${this.node}:20000`, startedAt: this.clock.t };
  }
  async waitReady(id: string): Promise<void> {
    const r = this.replicas.get(id);
    await ticks(this.reportAfterTicks);
    if (r) this.log.inFlight.set(r.model, (this.log.inFlight.get(r.model) ?? 1) - 1);
    if (!r || r.state === 'failed') {
      this.log.failures.push({ id, model: r?.model ?? '?', at: this.clock.t, mono: this.clock.mono });
      throw new LlmgwError('REPLICA_UNKNOWN_ARCHITECTURE', "llama-server exited: unknown model architecture: 'kev'", { logTail: '' });
    }
    this.replicas.set(id, { ...r, state: 'ready' });
  }
  /** Every stopReplica call: the replica, and when (fake clock). */
  readonly stopped: { id: string; at: number }[] = [];
  /** While set, a stop waits for it (a slow SIGTERM → SIGKILL). */
  stopGate: Promise<void> | null = null;
  async stopReplica(id: string): Promise<void> {
    this.stopped.push({ id, at: this.clock.t });
    if (this.stopGate) await this.stopGate;
    await ticks(1);
    this.clock.advance(this.observeMs);
    this.replicas.delete(id);
  }
  async readFileRange(): Promise<{ data: Buffer; size: number }> {
    throw new LlmgwError('MODEL_FILE_NOT_FOUND', 'no files on a fake node');
  }
  /** A line naming the replica; REPLICA_NOT_FOUND once it is gone from the node (as the node script says). */
  async logTail(id: string): Promise<string> {
    await ticks(1);
    if (!this.replicas.has(id)) throw new LlmgwError('REPLICA_NOT_FOUND', `node ${this.node}: log tail ${id}: no replica ${id} on this node`, { node: this.node });
    return `log of ${id}\n`;
  }
  async close(): Promise<void> {}
}
