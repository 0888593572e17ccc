/**
 * `llmgw serve --etcd`: several instances as one controller. The leader's reconciler is made per
 * term from the record in etcd. serve.ts imports this module only with --etcd, so a lone controller
 * does not load etcd3 (its gRPC stack and protobuf definitions: ~30 MB of RSS).
 */
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';
import type { NodeSpec } from '../fleet-spec/types.js';
import type { FleetRepo } from '../git/repo.js';
import type { HaController } from '../ha/controller.js';
import { openEtcd } from '../ha/etcd.js';
import { RolloutBoard } from '../ha/rollout-figures.js';
import { RouterRevisions } from '../ha/router-revisions.js';
import { RouterShares } from '../ha/router-shares.js';
import { clusterOwner, sharedValues } from '../ha/shared.js';
import type { ShellTime } from '../ha/shell-time.js';
import type { Fence, NodeDriver } from '../nodes/driver.js';
import { nodeTimers } from '../reconciler/loop.js';
import { DRAIN_PROBE_MS } from '../reconciler/stop-runner.js';
import type { SupersedeOf } from '../reconciler/node-fleet.js';
import type { ReconcilerOptions } from '../reconciler/reconciler-options.js';
import { SpecTracker } from '../git/tracker.js';
import type { EtcdConfig } from './config.js';
import { wireHa } from './ha-wiring.js';
import type { Instance } from './instance.js';
import { StatusWriter } from './status-writer.js';

/** What serve.ts makes the same way with or without etcd. */
export interface HaServeParts {
  readonly repo: FleetRepo;
  readonly instance: Instance;
  /** This instance's engine API key: the first instance's becomes the cluster's (shared.ts). */
  readonly engineApiKey: string;
  readonly log: Logger;
  readonly ownerTtlSeconds: number;
  /** The reconciler options every term shares (memory, secrets, logger, metrics callbacks). */
  readonly common: Pick<ReconcilerOptions, 'memory' | 'rolloutFigures' | 'modelLoad' | 'readSecret' | 'logger' | 'onPass' | 'onEngineInstall' | 'warmup'>;
  readonly openDriver: (n: NodeSpec, fence: () => Fence, supersede: SupersedeOf) => NodeDriver;
  readonly onLeadership: (leading: boolean) => void;
}

export interface HaServed {
  readonly controller: HaController;
  readonly client: Etcd3;
  readonly routerShares: RouterShares;
  /** This router's canary windows in etcd, and the leader's sum of every router's (#34); null without rollout figures. */
  readonly rolloutBoard: RolloutBoard | null;
}

export async function serveHa(e: EtcdConfig, p: HaServeParts): Promise<HaServed> {
  const { instance, log, repo } = p;
  // The HA shells' clock and timers: the real ones, here only (src/ha reads no clock of its own).
  const time: ShellTime = { now: () => Date.now(), timers: nodeTimers };
  const client = openEtcd(e, time.now);
  const shared = await sharedValues(client, e.prefix, p.engineApiKey);
  const routerShares = new RouterShares(client, e.prefix, instance.id, e.leaseTtlSeconds, e.retryPeriodMs, time, log.child({ component: 'router-shares' }));
  const owner = clusterOwner(shared.clusterId, e.prefix);
  // Every router's canary windows in etcd; the leader judges a step on all of them (#34). Published:
  // the windows of the step this instance's view shows (`view` is set just below).
  let view: HaController | null = null;
  const local = p.common.rolloutFigures;
  const rolloutBoard = local
    ? new RolloutBoard({
        client,
        prefix: e.prefix,
        id: instance.id,
        ttlSeconds: e.leaseTtlSeconds,
        refreshMs: e.retryPeriodMs,
        time,
        local,
        live: (model, w) => {
          const r = view?.model(model)?.rollout;
          return r?.phase === 'canary' && r.canaryDigest === w.canaryDigest && r.since === w.window.since;
        },
        log: log.child({ component: 'rollout-figures' }),
      })
    : null;
  const rolloutFigures = rolloutBoard?.figures();
  const { controller } = wireHa({
    client,
    etcd: e,
    instance,
    time,
    monotonic: () => performance.now(),
    logger: log,
    tracker: new SpecTracker(repo),
    engineApiKey: shared.engineApiKey,
    // the published revision this router routes from, and every other router's: a drain waits for them all
    routerRevisions: new RouterRevisions({ client, prefix: e.prefix, id: instance.id, ttlSeconds: e.leaseTtlSeconds, retryMs: e.retryPeriodMs, maxAgeMs: DRAIN_PROBE_MS, time, log: log.child({ component: 'router-revisions' }) }),
    onLeadership: (leading) => {
      rolloutBoard?.setLeading(leading);
      p.onLeadership(leading);
    },
    term: (t, election) => ({
      ...p.common,
      ...(rolloutFigures ? { rolloutFigures } : {}),
      // a status-branch epoch above this leader's own (while it holds the leader key; else above etcd's
      // revision) is a forgery (or from before a restore): it fences nothing (#36, N2); each commit's
      // fence summary is signed with the cluster's key, so a new leader reads back to the last one (#37)
      status: new StatusWriter(repo, () => election.fenceBound(), shared.statusFenceKey),
      tracker: new SpecTracker(repo, t.initialState.appliedRevision ? { resumeFrom: t.initialState.appliedRevision } : {}),
      driverFor: (n, supersede) => p.openDriver(n, () => ({ owner, label: `llmgw HA cluster ${e.prefix} (leader: ${instance.label})`, epoch: t.epoch, ttlSeconds: p.ownerTtlSeconds }), supersede),
    }),
  });
  view = controller;
  return { controller, client, routerShares, rolloutBoard };
}
