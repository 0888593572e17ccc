/**
 * The HA controller's parts on one etcd client, wired as `llmgw serve --etcd` runs them (serve.ts):
 * the Election, the state record (EtcdStateStore), the published snapshot (Published), the request
 * channel (Requests) and the HaController whose term reconcilers resume from that record, publish
 * through it and are fenced by that election. What a term's reconciler acts on — the fleet repo's
 * tracker and status writer, the node drivers — is the caller's (`term`): real nodes in serve, fake
 * ones in the scale bench (test/harness/scale-controller.ts).
 */
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';
import { Requests } from '../ha/channel.js';
import { HaController, type RouterRevisionsPort, type TermOptions } from '../ha/controller.js';
import { Election } from '../ha/election.js';
import type { EtcdSettings } from '../ha/etcd.js';
import { EtcdStateStore } from '../ha/etcd-state.js';
import { Published } from '../ha/published-channel.js';
import type { ShellTime } from '../ha/shell-time.js';
import { Reconciler, type FleetSource, type ReconcilerOptions } from '../reconciler/reconciler.js';

/** What a term's reconciler is made with besides what the wiring gives it (the record, leadership, fencing). */
export type TermParts = Omit<ReconcilerOptions, 'stateStore' | 'initialState' | 'initialStateProblem' | 'engineApiKey' | 'leader' | 'control' | 'epoch' | 'onDeposed' | 'epochBound'>;

export interface HaWiringOptions {
  readonly client: Etcd3;
  readonly etcd: Pick<EtcdSettings, 'prefix' | 'leaseTtlSeconds' | 'renewDeadlineMs' | 'retryPeriodMs'>;
  readonly instance: { readonly id: string; readonly label: string };
  /** The wall clock and timers of the HA shells; `monotonic` times the election's renewals. */
  readonly time: ShellTime;
  readonly monotonic: () => number;
  readonly logger: Logger;
  /** The standby's own look at the fleet repo. */
  readonly tracker: FleetSource;
  /** The cluster's engine API key (shared through etcd). */
  readonly engineApiKey: string;
  readonly onLeadership?: (leading: boolean) => void;
  /** Each router's applied revision of the published snapshot in etcd, for drains (ha/router-revisions.ts). */
  readonly routerRevisions?: RouterRevisionsPort;
  /** The term's own parts; `election` bounds the epochs a status branch or a node may carry. */
  readonly term: (t: TermOptions, election: Election) => TermParts;
}

export interface HaWiring {
  readonly election: Election;
  readonly stateStore: EtcdStateStore;
  readonly published: Published;
  readonly requests: Requests;
  readonly controller: HaController;
}

export function wireHa(o: HaWiringOptions): HaWiring {
  const { prefix } = o.etcd;
  const election = new Election(o.client, {
    prefix,
    id: o.instance.id,
    label: o.instance.label,
    leaseTtlSeconds: o.etcd.leaseTtlSeconds,
    renewDeadlineMs: o.etcd.renewDeadlineMs,
    retryPeriodMs: o.etcd.retryPeriodMs,
    clock: o.time.now,
    monotonic: o.monotonic,
    timers: o.time.timers,
    logger: o.logger.child({ component: 'election' }),
  });
  const stateStore = new EtcdStateStore(election, o.client, prefix, o.time.now);
  const published = new Published(election, o.client, prefix, o.time.timers);
  // an entry past etcd's limit is cut and the rest written (keyed-layout.ts): said, once per write
  stateStore.onCut = published.onCut = (r) => o.logger.warn({ code: r.code, err: r.message }, 'an etcd entry past the size limit was cut to fit');
  const requests = new Requests(o.client, prefix, o.instance.id, o.time);
  const controller = new HaController({
    election,
    published,
    requests,
    time: o.time,
    stateStore,
    instance: o.instance,
    prefix,
    tracker: o.tracker,
    engineApiKey: o.engineApiKey,
    logger: o.logger,
    ...(o.onLeadership ? { onLeadership: o.onLeadership } : {}),
    ...(o.routerRevisions ? { routerRevisions: o.routerRevisions } : {}),
    makeReconciler: (t) =>
      new Reconciler({
        ...o.term(t, election),
        stateStore,
        initialState: t.initialState,
        initialStateProblem: t.initialStateProblem,
        engineApiKey: o.engineApiKey,
        leader: t.leader,
        control: t.control,
        epoch: () => t.epoch,
        onDeposed: t.onDeposed,
        routing: t.routing,
        // an owner-record epoch above etcd's revision was not made by this etcd (a restore, a forgery): taken over
        epochBound: () => election.revision(),
      }),
  });
  return { election, stateStore, published, requests, controller };
}
