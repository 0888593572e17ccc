/**
 * An in-process HA controller at scale (issue #28's bench): N on-demand models on 100 fake nodes
 * (fake-node.ts), wired as `llmgw serve --etcd` wires it (src/serve/ha-wiring.ts) — the real
 * Election, EtcdStateStore and Published on a real etcd, the real SpecTracker over a real git fleet
 * repo and the real StatusWriter into its status branch — plus the controller's metrics registry.
 *
 * The record is made realistic the way a fleet gets it: a few per cent of the models are demanded
 * (`touch`) and run a ready replica; about one in a hundred is demanded too but its replicas die on
 * the node, so it is started park_after_failures times and parked. settle() drives passes until
 * that is done and nothing more changes; pass() then runs one pass and says what it cost.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import pino from 'pino';
import { FleetRepo } from '../../src/git/repo.js';
import { SpecTracker } from '../../src/git/tracker.js';
import type { HaController } from '../../src/ha/controller.js';
import { ETCD_DEFAULTS, openEtcd, type EtcdSettings } from '../../src/ha/etcd.js';
import { createMetrics, type LlmgwMetrics } from '../../src/metrics/index.js';
import type { Reconciler } from '../../src/reconciler/reconciler.js';
import { wireHa, type HaWiring } from '../../src/serve/ha-wiring.js';
import { StatusWriter } from '../../src/serve/status-writer.js';
import { modelName, nodeName } from './big-fleet.js';
import { FakeClock, FakeFleetLog, FakeNode } from './fake-node.js';
import { cleanupTempDirs, revParse, WorkRepo } from './git.js';
import { realTime } from './real-time.js';
import { until } from './wait.js';

export const SCALE_NODES = 100;
const STATUS_BRANCH = 'llmgw/status';
/** Models demanded at once while settling (default: all of them, one burst). */
const SETTLE_BATCH = Number(process.env['SCALE_SETTLE_BATCH'] ?? Infinity);

export interface ScaleControllerOptions {
  readonly models: number;
  readonly etcdEndpoint: string;
  readonly prefix: string;
  /** Every this-many-th model is demanded and runs a replica (default 33: 3 %). */
  readonly demandEvery?: number;
  /** Every this-many-th model is demanded and fails until parked (default 100: 1 %). */
  readonly failEvery?: number;
}

/** What one pass cost (and what ran in the background after it, until the controller was quiet). */
export interface PassCost {
  /** The reconciler's own figure: lastPass.durationMs (sync, look, decide, apply; not the writes after). */
  readonly passMs: number;
  readonly actions: number;
  /** Bytes of keys and values the state record's and the published snapshot's txns sent (DocWriteStats). */
  readonly stateBytes: number;
  readonly publishedBytes: number;
  readonly txns: number;
  /** etcd's revision delta over the pass (one per txn) and what a watch on the prefix saw put. */
  readonly revisions: number;
  readonly watchedKeys: readonly string[];
  readonly watchedBytes: number;
  /** The StatusWriter's write in this pass (render, compare, commit when changed), and whether the branch moved. */
  readonly statusMs: number;
  readonly statusCommitted: boolean;
}

/** The StatusWriter, timed: how long its last write took (a commit when the files changed). */
class TimedStatusWriter extends StatusWriter {
  lastWriteMs = NaN;
  override async write(...args: Parameters<StatusWriter['write']>): ReturnType<StatusWriter['write']> {
    const t0 = performance.now();
    try {
      return await super.write(...args);
    } finally {
      this.lastWriteMs = performance.now() - t0;
    }
  }
}

/** Calls of `obj[key]` (a method returning a promise) that have not settled yet, so a caller can wait for them. */
function trackCalls<K extends string, T extends Record<K, (...a: never[]) => Promise<unknown>>>(obj: T, key: K): () => Promise<void> {
  const pending = new Set<Promise<unknown>>();
  const original = obj[key].bind(obj) as (...a: unknown[]) => Promise<unknown>;
  (obj as Record<K, unknown>)[key] = (...a: unknown[]): Promise<unknown> => {
    const p = original(...a);
    pending.add(p);
    void p.catch(() => undefined).finally(() => pending.delete(p));
    return p;
  };
  return async () => {
    while (pending.size > 0) await Promise.allSettled([...pending]);
  };
}

export function scaleFleetFiles(models: number): Record<string, string> {
  const files: Record<string, string> = {
    'fleet.yaml': ['poll_interval: 1h', 'park_after_failures: 5', 'backoff: { initial: 100ms, max: 400ms }', 'placement_reserve: 1GiB', ''].join('\n'),
    'engines/llama-cpp.yaml': 'versions:\n  b1:\n    path: /opt/llama/b1/llama-server\n',
    'profiles/chat.yaml': 'engine: llama-cpp@b1\nctx_size: 2048\n',
  };
  for (let i = 0; i < SCALE_NODES; i++) {
    files[`nodes/${nodeName(i)}.yaml`] = [`host: 10.0.${Math.floor(i / 250)}.${(i % 250) + 1}`, 'host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvVj2GfUu1xJ1u3u9QmTq2l1nq8mQnJ6zq3l9nG7Y0a', 'identity: fleet-key', 'capacity: { memory: 64GiB }', 'ports: { from: 20000, to: 20999 }', ''].join('\n');
  }
  for (let i = 0; i < models; i++) {
    const name = modelName(i);
    const sha = `a${(i + 1).toString(16).padStart(63, '0')}`; // a letter first: YAML reads all-digit ones as numbers
    files[`models/${name}.yaml`] = [`source: hf://team-${i % 7}/${name}-GGUF/${name}.gguf`, `sha256: ${sha}`, 'profile: chat', 'on_demand: { idle_timeout: 1h }', 'memory: 256MiB', ''].join('\n');
  }
  return files;
}

export interface ScaleController {
  readonly models: number;
  readonly ha: HaController;
  readonly wiring: HaWiring;
  readonly client: Etcd3;
  readonly settings: EtcdSettings;
  readonly metrics: LlmgwMetrics;
  readonly nodes: ReadonlyMap<string, FakeNode>;
  readonly fleetLog: FakeFleetLog;
  readonly demanded: readonly string[];
  readonly failing: readonly string[];
  /** The fleet repo's gitdir (the status branch is written there). */
  readonly gitdir: string;
  reconciler(): Reconciler;
  /** Passes until the demanded models are ready, the failing ones parked and a pass acts on nothing. */
  settle(timeoutMs: number): Promise<number>;
  /** One pass, then until the writes it (and what it started) caused have landed. */
  pass(trigger: string): Promise<PassCost>;
  /**
   * The status writer alone on a quiet controller: the current snapshot with one model's failure
   * count moved (further each call), written by the same StatusWriter (its TreeCache warm); its time and whether it committed.
   */
  statusCommitOfOne(model: string): Promise<{ ms: number; committed: boolean }>;
  close(): Promise<void>;
}

export async function startScaleController(o: ScaleControllerOptions): Promise<ScaleController> {
  const work = await WorkRepo.init();
  await work.write(scaleFleetFiles(o.models));
  await work.commit(`scale fleet: ${o.models} on-demand models on ${SCALE_NODES} nodes`);
  const repo = new FleetRepo({ path: work.dir });

  const names = Array.from({ length: o.models }, (_, i) => modelName(i));
  const demanded = names.filter((_, i) => i % (o.demandEvery ?? 33) === 1);
  const failing = names.filter((_, i) => i % (o.failEvery ?? 100) === 7);
  const clock = new FakeClock(Date.now());
  const fleetLog = new FakeFleetLog();
  const failSet = new Set(failing);
  const nodes = new Map(Array.from({ length: SCALE_NODES }, (_, i) => [nodeName(i), new FakeNode(nodeName(i), clock, fleetLog, failSet, 2)] as const));

  const settings: EtcdSettings = { hosts: [o.etcdEndpoint], prefix: o.prefix, tls: null, auth: null, ...ETCD_DEFAULTS };
  const client = openEtcd(settings, realTime.now);
  const logger = pino({ level: process.env['SCALE_LOG'] ?? 'silent' }, pino.destination(2)); // stderr: a bench child's stdout is its figures
  const metrics = createMetrics();
  const status = new TimedStatusWriter(repo);
  const wiring = wireHa({
    client,
    etcd: settings,
    instance: { id: 'scale-a', label: 'scale bench instance a' },
    time: realTime,
    monotonic: () => performance.now(),
    logger,
    tracker: new SpecTracker(repo),
    engineApiKey: 'scale-engine-key',
    onLeadership: (leading) => metrics.leaderChanged(leading),
    term: (t) => ({
      logger,
      status,
      tracker: new SpecTracker(repo, t.initialState.appliedRevision ? { resumeFrom: t.initialState.appliedRevision } : {}),
      driverFor: (n) => nodes.get(n.name)!,
      // fake nodes serve no /slots: nothing is in flight on them
      inFlight: async () => 0,
      onPass: (result, seconds) => metrics.passFinished(result, seconds),
    }),
  });
  const ha = wiring.controller;
  const published = trackCalls(wiring.published, 'publish');
  const saved = trackCalls(wiring.stateStore, 'save');
  ha.onSnapshot((s) => metrics.applySnapshot(s));
  metrics.applySnapshot(ha.snapshot());

  // what etcd was sent under the prefix, from a watch (the cross-check of the writers' own counts)
  const watched: { key: string; bytes: number; rev: number }[] = [];
  const watcher = await client.watch().prefix(`${o.prefix}/`).create();
  const seen = (kv: IKeyValue, del: boolean): void => void watched.push({ key: `${kv.key.toString('utf8').slice(o.prefix.length + 1)}${del ? ' (delete)' : ''}`, bytes: kv.key.length + kv.value.length, rev: Number(kv.mod_revision) });
  watcher.on('put', (kv: IKeyValue) => seen(kv, false));
  watcher.on('delete', (kv: IKeyValue) => seen(kv, true));
  const revision = async (): Promise<number> => Number((await client.get(`${o.prefix}/nothing`).exec()).header.revision);

  await ha.start();
  const reconciler = (): Reconciler => {
    const r = ha.reconciler();
    if (!r) throw new Error('the scale controller does not lead (no term reconciler)');
    return r;
  };
  await until('the scale controller leads and has made its first pass', 120_000, () => ha.reconciler()?.snapshot().lastPass);
  if (!ha.spec()) throw new Error(`the scale fleet's spec was not applied: ${JSON.stringify(ha.snapshot().rejected ?? ha.snapshot().lastSyncError).slice(0, 2000)}`);

  /** Until the writes since the last call and what the pass started have landed (starts conclude within ticks on fake nodes). */
  const quiet = async (): Promise<void> => {
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 20));
      await Promise.all([published(), saved()]);
    }
  };

  const pass = async (trigger: string): Promise<PassCost> => {
    const r = reconciler();
    await quiet();
    const [s0, p0, rev0, head0] = [wiring.stateStore.stats, wiring.published.stats, await revision(), await revParse(repo.gitdir, STATUS_BRANCH)];
    status.lastWriteMs = NaN;
    await r.requestPass(trigger);
    const last = r.snapshot().lastPass!;
    const statusMs = status.lastWriteMs;
    await quiet();
    const [s1, p1, rev1, head1] = [wiring.stateStore.stats, wiring.published.stats, await revision(), await revParse(repo.gitdir, STATUS_BRANCH)];
    if (rev1 > rev0) await until(`the watch to see revision ${rev1}`, 10_000, () => watched.some((w) => w.rev >= rev1));
    const mine = watched.filter((w) => w.rev > rev0 && w.rev <= rev1);
    return {
      passMs: last.durationMs,
      actions: last.actions,
      stateBytes: s1.bytes - s0.bytes,
      publishedBytes: p1.bytes - p0.bytes,
      txns: s1.txns - s0.txns + (p1.txns - p0.txns),
      revisions: rev1 - rev0,
      watchedKeys: mine.map((w) => w.key),
      watchedBytes: mine.reduce((n, w) => n + w.bytes, 0),
      statusMs,
      statusCommitted: head1 !== head0,
    };
  };

  /**
   * Demands the models (SETTLE_BATCH at a time: by default all at once, as after an outage), each
   * batch until its models are ready or parked, under one leader term: when every start's outcome
   * re-summarized and published the whole fleet, 400 concluding together held the event loop past the
   * election's renew deadline at 10,000 models and the leader was deposed. Then passes until one acts
   * on nothing and writes nothing.
   */
  const settle = async (timeoutMs: number): Promise<number> => {
    const deadline = Date.now() + timeoutMs;
    const failSet = new Set(failing);
    const wanted = [...demanded, ...failing].sort();
    let passes = 0;
    const diag = (): string => {
      const ms = ha.snapshot().models;
      return `leading: ${ha.reconciler() !== null}; phases: ${JSON.stringify(Object.fromEntries([...new Set(ms.map((m) => m.phase))].map((p) => [p, ms.filter((m) => m.phase === p).length])))}; parked ${ms.filter((m) => m.parked).length}; starts ${fleetLog.starts.length}`;
    };
    const settled = (batch: readonly string[]): boolean => batch.every((m) => (failSet.has(m) ? reconciler().model(m)?.parked != null : reconciler().model(m)?.phase === 'ready'));
    const epoch = wiring.election.epoch;
    for (let i = 0; i < wanted.length; i += SETTLE_BATCH) {
      const batch = wanted.slice(i, i + SETTLE_BATCH);
      for (const m of batch) ha.touch(m);
      await until(`models ${batch.join(', ')} ready or parked`, deadline - Date.now(), async () => (passes++, await pass('scale: settle'), settled(batch)), { diag });
    }
    await until('a pass that acts on nothing and writes nothing', deadline - Date.now(), async () => {
      passes++;
      const c = await pass('scale: settle');
      return settled(wanted) && c.actions === 0 && c.revisions === 0;
    }, { diag });
    if (wiring.election.epoch !== epoch) throw new Error(`the leader's term changed while settling (epoch ${epoch} → ${wiring.election.epoch}): it lost its lease`);
    return passes;
  };

  let bumps = 0; // each statusCommitOfOne moves the count further: every one is a change
  return {
    models: o.models,
    ha,
    wiring,
    client,
    settings,
    metrics,
    nodes,
    fleetLog,
    demanded,
    failing,
    gitdir: repo.gitdir,
    reconciler,
    settle,
    pass,
    async statusCommitOfOne(model) {
      await quiet();
      const r = reconciler();
      const snap = r.snapshot();
      const changed = { ...snap, models: snap.models.map((m) => (m.name === model ? { ...m, consecutiveFailures: m.consecutiveFailures + ++bumps } : m)) };
      const head0 = await revParse(repo.gitdir, STATUS_BRANCH);
      const t0 = performance.now();
      const stale = await status.write(changed, r.spec()!, realTime.now, logger, wiring.election.epoch ?? undefined);
      const ms = performance.now() - t0;
      if (stale) throw new Error(`the status write was refused: ${stale.message}`);
      return { ms, committed: (await revParse(repo.gitdir, STATUS_BRANCH)) !== head0 };
    },
    async close() {
      await watcher.cancel();
      await ha.stop();
      await Promise.all([published(), saved()]);
      client.close();
      metrics.close();
      await cleanupTempDirs();
    },
  };
}
