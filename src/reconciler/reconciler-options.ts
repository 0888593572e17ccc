/**
 * What a Reconciler (reconciler.ts) is made with: the fleet repo's tracker, the nodes' drivers, the
 * state store and the status sink, the clocks and timers, and for HA the leadership, epoch and
 * deposal hooks.
 */
import type { Logger } from 'pino';
import type { ReasonRef } from '../errors/catalogue.js';
import type { SpecTracker } from '../git/tracker.js';
import type { NodeDriver } from '../nodes/driver.js';
import type { NodeSpec } from '../fleet-spec/types.js';
import type { LoopTimers } from './loop.js';
import type { MemoryEstimator } from './memory.js';
import type { SupersedeOf } from './node-fleet.js';
import type { StatusSink } from './persist.js';
import type { ControllerState } from './state.js';
import type { StateStore } from './state-store.js';
import type { RoutingAcks } from './routing-acks.js';
import type { InFlight } from './stops.js';
import type { RolloutFigures } from '../rollout/types.js';
import type { ChecksRun } from './rollout-runner.js';
import type { ControlView } from './view.js';
import type { LoadReport } from '../scale/decide.js';
import type { ReplicaWarmup } from './warm-up.js';

/** What the loop needs of the fleet repo's tracker (a fake serves a fixed spec in tests). */
export type FleetSource = Pick<SpecTracker, 'refresh' | 'applied' | 'rejected' | 'lastSyncOk' | 'lastSyncError'> & Partial<Pick<SpecTracker, 'specAt'>>;

export interface ReconcilerOptions {
  readonly tracker: FleetSource;
  /** Where each pass's status goes (the status branch, injected by the composition root); null for none. */
  readonly status: StatusSink | null;
  /** `supersede`: what the driver's fence names to take over (Fence.supersede), asked for each action. */
  readonly driverFor: (node: NodeSpec, supersede: SupersedeOf) => NodeDriver;
  readonly stateStore: Pick<StateStore, 'save' | 'path'>;
  readonly initialState: ControllerState;
  /** Why the state file could not be used at start (it was moved aside), shown in status. */
  readonly initialStateProblem?: ReasonRef | null;
  readonly engineApiKey: string;
  /**
   * A secret's value by name (a file in the controller's secrets dir): models' download tokens.
   * Throws LlmgwError SECRET_NOT_FOUND / SECRET_INVALID. Without it, a model with token: cannot be
   * fetched (SECRET_NOT_FOUND).
   */
  readonly readSecret?: (name: string) => Promise<string>;
  readonly logger: Logger;
  /** Wall clock (epoch ms): the times in the state record. */
  readonly clock?: () => number;
  /** A monotonic clock (ms): tells a step of the wall clock from time passing. */
  readonly monotonic?: () => number;
  readonly timers?: LoopTimers;
  /** "Am I the leader?" — the one question the loop asks before it acts. */
  readonly leader?: () => boolean;
  /** Who this instance is and who leads (snapshot's control); default: a lone controller. */
  readonly control?: () => ControlView;
  /** The fencing epoch of this leader's term (etcd) for nodes' owner records and status commits; 0 alone. */
  readonly epoch?: () => number;
  /** A node has seen a newer epoch of this cluster: a newer leader acts (the HA shell steps down). */
  readonly onDeposed?: (reason: ReasonRef) => void;
  /**
   * The highest epoch that can be real (HA: etcd's current revision; a lone controller: 0), read
   * after a look that found a newer epoch on a node: one above it was not made by this etcd and is
   * taken over (ownership.ts). Absent: every newer epoch is real.
   */
  readonly epochBound?: () => Promise<number>;
  readonly memory?: MemoryEstimator;
  /** Stops and observations run at most this many at once. */
  readonly concurrency?: number;
  readonly observeTimeoutMs?: number;
  /** Makes a new replica id (deterministic in tests). */
  readonly newReplicaId?: (model: string) => string;
  /** Called after every pass with its result (metrics). */
  readonly onPass?: (result: 'ok' | 'error', durationSeconds: number) => void;
  readonly onEngineInstall?: (node: string, engine: string, version: string, result: 'ok' | 'error') => void;
  /** Warms each new replica up before it takes traffic (warm-up.ts); absent: none. */
  readonly warmup?: ReplicaWarmup;
  /** Runs a rollout's checks against a replica (default: rollout/check.ts's runChecks over HTTP). */
  readonly runChecks?: ChecksRun;
  /** What the routers saw of each arm of a canary step (serve: this instance's router, or every router's in HA); none: steps are judged on no figures. */
  readonly rolloutFigures?: RolloutFigures;
  /** The routers' load reports, read each pass (#42: router/load-report.ts); absent: no load (ranged models keep their min). */
  readonly modelLoad?: () => readonly LoadReport[];
  /** What a replica has in flight (default: its GET /slots with the engine key). */
  readonly inFlight?: (endpoint: string) => Promise<InFlight>;
  /** The other routers a drain waits for (HA: the standbys, through etcd); absent: this instance's router is the only one. */
  readonly routing?: RoutingAcks;
}
