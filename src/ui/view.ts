/**
 * The status page's view (pure): one snapshot shaped for the page — the header, the models grouped
 * by what needs attention (the same order, words and details as `llmgw ctl status`, from
 * ctl-format.ts), and the nodes as memory bars with the number placement uses (the declared
 * capacity where a node sets one, else the observed total; minus placement_reserve; minus what
 * llmgw's replicas take by the models' estimates).
 */
import { Reasons } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { formatBytes } from '../fleet-spec/units.js';
import type { FleetSnapshot, ModelPhase } from '../reconciler/view.js';
import { controlLines, type ControlLine, GROUP_BLURBS, modelDetail, readyCount, groupText, replicaDeviceText, scalingText, unparkLine } from '../format/ctl-format.js';
import type { RouterFigures } from './figures.js';
import { modelJson, replicaDeviceJson, statusJson, type ModelJson, type ReasonJson, type StatusJson, type UnplaceableJson } from '../wire/shape.js';
import { ALL_MODELS, attentionOrder, selectPage, type ViewPageInfo, type ViewQuery } from './view-page.js';
import { pageRollout, type PageRollout } from './rollout-view.js';
import type { CanarySpec } from '../rollout/types.js';

export interface PageReplica {
  readonly id: string;
  readonly node: string;
  readonly port: string;
  readonly phase: string;
  readonly since: string;
  /** Its place on devices in `ctl replicas`' words ("Vulkan0 9/9 layers, 24.5 MiB reserved"); null: host only. */
  readonly device: string | null;
  /** An RPC group's hosts in `ctl replicas`' words ("node-1 head 600 MiB + node-2 worker 600 MiB"); null: one node (#40). */
  readonly group: string | null;
}

export interface PageModel {
  readonly name: string;
  readonly phase: ModelPhase;
  /** "1/1", "0/0 idle". */
  readonly ready: string;
  readonly detail: string;
  readonly scaling: string;
  readonly consecutiveFailures: number;
  /** Why it needs attention (the park's last error, the unplaceable reason, the last failure). */
  readonly reason: ReasonJson | null;
  readonly unplaceable: (UnplaceableJson & { readonly needText: string | null; readonly largestFreeText: string | null }) | null;
  /** The command that unparks it (parked models). */
  readonly unpark: string | null;
  /** Whether the page offers Retry (parked, or backing off after failures). */
  readonly retry: boolean;
  readonly memory: string | null;
  readonly replicas: readonly PageReplica[];
  /** The router's figures for it (from this controller's counters), in words; null before a reading. */
  readonly router: string | null;
  /** Its rollout while one runs or holds a revision back (rollout-view.ts); null otherwise. */
  readonly rollout: PageRollout | null;
}

export interface PageGroup {
  readonly phase: ModelPhase;
  readonly blurb: string | null;
  readonly models: readonly PageModel[];
}

export interface PageNodeReplica {
  readonly id: string;
  readonly model: string;
  readonly phase: string;
  readonly bytes: number | null;
  readonly text: string;
}

export interface PageNode {
  readonly name: string;
  readonly reachable: boolean;
  readonly error: ReasonJson | null;
  /** What placement counts as the node's memory, and where that number comes from; null when unknown. */
  readonly capacity: { readonly bytes: number; readonly source: 'declared' | 'observed'; readonly text: string } | null;
  readonly reserve: { readonly bytes: number; readonly text: string };
  readonly taken: { readonly bytes: number; readonly text: string };
  readonly free: { readonly bytes: number; readonly text: string } | null;
  readonly replicas: readonly PageNodeReplica[];
}

export interface PageView {
  readonly at: string;
  readonly status: StatusJson;
  /** The header's lines (label, text), in `ctl status`'s words. */
  readonly control: readonly ControlLine[];
  readonly rejected: { readonly revision: string; readonly problems: readonly { readonly where: string; readonly message: string; readonly code: string }[]; readonly hint: string } | null;
  readonly groups: readonly PageGroup[];
  readonly nodes: readonly PageNode[];
  /** The page of the models the groups hold (view-page.ts): all of them without a query. */
  readonly page?: ViewPageInfo;
}

/** What every page of one snapshot shares: built once per snapshot, not per client or figure tick. */
export interface ViewBase {
  readonly at: string;
  readonly status: StatusJson;
  readonly control: readonly ControlLine[];
  readonly rejected: PageView['rejected'];
  readonly nodes: readonly PageNode[];
  /** Every model, in attention order (view-page.ts). */
  readonly models: readonly ModelJson[];
  /** The canary each model in a rollout declares for the revision under test (its steps, what a step is judged on). */
  readonly canaries: ReadonlyMap<string, CanarySpec>;
}

const sized = (bytes: number): { bytes: number; text: string } => ({ bytes, text: formatBytes(bytes) });

function portOf(endpoint: string): string {
  const m = /:(\d+)\/?$/.exec(endpoint);
  return m ? m[1]! : '-';
}

/** "0.4 req/s, p50 ≤ 250 ms, queue 0, 35% of prompt tokens from cache". */
export function figuresText(f: RouterFigures): string {
  const rps = f.requestsPerSecond >= 10 ? f.requestsPerSecond.toFixed(0) : f.requestsPerSecond.toFixed(1);
  const p50 = f.p50Seconds === null ? 'p50 -' : f.p50Seconds === Infinity ? 'p50 > 600 s' : `p50 ≤ ${f.p50Seconds < 1 ? `${Math.round(f.p50Seconds * 1000)} ms` : `${f.p50Seconds} s`}`;
  const cache = f.cacheShare === null ? 'no prompt tokens' : `${Math.round(f.cacheShare * 100)}% of prompt tokens from cache`;
  return `${rps} req/s, ${p50}, queue ${f.queueDepth}, ${cache}`;
}

/** A replica's phase, and which revision it runs where that matters: the rollout's arm (stable, canary), or outdated. */
function replicaPhase(r: ModelJson['replicas'][number], rollout: ModelJson['rollout']): string {
  if (rollout && rollout.phase !== 'promoted') {
    if (r.digest === rollout.stableDigest) return `${r.phase} (stable)`;
    if (r.digest === rollout.digest) return `${r.phase} (${rollout.phase === 'canary' ? 'canary' : 'new revision'})`;
  }
  return r.outdated ? `${r.phase} (outdated)` : r.phase;
}

function pageModel(m: ModelJson, at: string, figures: ReadonlyMap<string, RouterFigures> | null, canary: CanarySpec | null): PageModel {
  const f = figures?.get(m.name) ?? null;
  const reason = m.parked ? m.parked.lastError : m.unplaceable ? { code: m.unplaceable.code, message: m.unplaceable.reason, hint: m.unplaceable.hint } : m.consecutiveFailures > 0 ? m.lastError : null;
  return {
    name: m.name,
    phase: m.phase,
    ready: readyCount(m),
    detail: modelDetail(m, at),
    scaling: scalingText(m, at),
    consecutiveFailures: m.consecutiveFailures,
    reason,
    unplaceable: m.unplaceable
      ? { ...m.unplaceable, needText: m.unplaceable.needBytes === null ? null : formatBytes(m.unplaceable.needBytes), largestFreeText: m.unplaceable.largestFree ? `${formatBytes(m.unplaceable.largestFree.bytes)} on ${m.unplaceable.largestFree.node}` : null }
      : null,
    unpark: m.parked ? unparkLine(m.name) : null,
    retry: m.parked !== null || m.consecutiveFailures > 0,
    memory: m.memoryBytes === null ? null : formatBytes(m.memoryBytes),
    replicas: m.replicas.map((r) => ({ id: r.id, node: r.node, port: portOf(r.endpoint), phase: replicaPhase(r, m.rollout), since: r.startedAt, device: r.device ? replicaDeviceText(r.device) : null, group: r.group ? groupText(r.group) : null })),
    router: f ? figuresText(f) : figures ? figuresText({ requestsPerSecond: 0, p50Seconds: null, queueDepth: 0, cacheShare: null }) : null,
    rollout: m.rollout ? pageRollout(m.rollout, canary) : null,
  };
}

/** The whole fleet's view (GET /admin/v1/view without a query). */
export function pageView(s: FleetSnapshot, spec: FleetSpec | null, figures: ReadonlyMap<string, RouterFigures> | null = null): PageView {
  return viewOfPage(viewBase(s, spec), ALL_MODELS, figures);
}

/** The view of the page `q` selects: the base's header and nodes, the cards of that page's models only. */
export function viewOfPage(base: ViewBase, q: ViewQuery, figures: ReadonlyMap<string, RouterFigures> | null = null): PageView {
  const { models, info } = selectPage(base.models, q);
  const groups: PageGroup[] = [];
  for (const m of models) {
    const last = groups[groups.length - 1];
    const card = pageModel(m, base.at, figures, base.canaries.get(m.name) ?? null);
    if (last !== undefined && last.phase === m.phase) (last.models as PageModel[]).push(card);
    else groups.push({ phase: m.phase, blurb: GROUP_BLURBS[m.phase] ?? null, models: [card] });
  }
  return { at: base.at, status: base.status, control: base.control, rejected: base.rejected, groups, nodes: base.nodes, page: info };
}

/** What every page of a snapshot shares (the header, the nodes, the models in attention order). */
export function viewBase(s: FleetSnapshot, spec: FleetSpec | null): ViewBase {
  const status = statusJson(s);
  const at = status.at;
  const models = attentionOrder(s.models.map((m) => modelJson(m, s.appliedRevision, s.at)));

  const reserveBytes = spec?.settings.placementReserveBytes ?? 0;
  // every replica by its node, in one walk over the models (not one per node: 10,000 models × 100 nodes)
  const byNode = new Map<string, PageNodeReplica[]>();
  for (const m of s.models) {
    for (const r of m.replicas) {
      // an RPC group (#40) takes each host's share on that host's bar
      for (const on of r.group ?? [{ node: r.node, role: null, bytes: m.memoryBytes }]) {
        const bytes = on.bytes;
        let list = byNode.get(on.node);
        if (list === undefined) byNode.set(on.node, (list = []));
        const device = r.device ? `; ${replicaDeviceText(replicaDeviceJson(r.device))}` : '';
        list.push({ id: r.id, model: r.model, phase: r.phase, bytes, text: `${r.model} (${r.phase}${on.role ? `, rpc ${on.role}` : ''}${bytes === null ? '' : `, ${formatBytes(bytes)}`}${device})` });
      }
    }
  }
  const nodes: PageNode[] = s.nodes.map((n) => {
    const declared = spec?.nodes[n.name]?.capacity.memoryBytes ?? null;
    const capacityBytes = declared ?? n.memory?.totalBytes ?? null;
    const replicas: PageNodeReplica[] = byNode.get(n.name) ?? [];
    // as the planner counts them: every replica but a failed one takes its model's need
    const taken = replicas.reduce((t, r) => t + (r.phase === 'failed' ? 0 : (r.bytes ?? 0)), 0);
    return {
      name: n.name,
      reachable: n.reachable,
      error: n.error ? { code: n.error.code, message: n.error.message, hint: (Reasons as Record<string, { hint: string } | undefined>)[n.error.code]?.hint ?? '' } : null,
      capacity: capacityBytes === null ? null : { ...sized(capacityBytes), source: declared !== null ? 'declared' : 'observed' },
      reserve: sized(reserveBytes),
      taken: sized(taken),
      free: capacityBytes === null ? null : sized(Math.max(0, capacityBytes - reserveBytes - taken)),
      replicas,
    };
  });

  // the steps of a canary are the revision under test's (the spec in force, while its digest is that revision)
  const canaries = new Map<string, CanarySpec>();
  for (const m of s.models) {
    const canary = m.spec.rollout?.canary;
    if (m.rollout && canary && m.spec.digest === m.rollout.canaryDigest) canaries.set(m.name, canary);
  }

  const r = status.spec.rejected;
  return {
    at,
    status,
    control: controlLines(status, at),
    rejected: r ? { revision: r.revision, hint: r.hint, problems: r.problems.map((p) => ({ where: `${p.file}${p.line !== null ? `:${p.line}` : ''}`, message: p.message, code: p.code })) } : null,
    nodes,
    models,
    canaries,
  };
}
