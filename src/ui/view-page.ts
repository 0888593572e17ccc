/**
 * The status page's feed at scale (#37 item 1, pure): a client asks the view stream for a page of
 * the models (a filter by phase or node and a search by name), gets that page's whole view once, then
 * only what changed model by model. So the first frame stays small at 10,000 models (a page, not the
 * fleet: a client was dropped when one frame passed its 256 KiB budget), a change to one model sends
 * one model, and a figure tick rebuilds the page's cards only.
 *
 * The models are in attention order (the phases of MODEL_PHASES: parked, unplaceable, failing, …,
 * ready, idle), so the first page shows what needs attention and the ready ones follow, paged.
 */
import { MODEL_PHASES, type ModelPhase } from '../reconciler/view.js';
import type { ModelJson } from '../wire/shape.js';
import type { PageModel, PageNode, PageView } from './view.js';

export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 500;

/** What a client of the view asks for: a page of `size` models (0: the first) of those matching. */
export interface ViewQuery {
  readonly page: number;
  readonly size: number;
  readonly phase: ModelPhase | null;
  /** Models with a replica on this node. */
  readonly node: string | null;
  /** A part of the model's name or an alias, any case. */
  readonly q: string | null;
}

/** Every model on one page (GET /admin/v1/view without a query: the API as it was). */
export const ALL_MODELS: ViewQuery = Object.freeze({ page: 0, size: Number.POSITIVE_INFINITY, phase: null, node: null, q: null });

/** The query of a request's query string (checked by its schema: numbers in range, a known phase). */
export function viewQueryOf(raw: { page?: number; size?: number; phase?: string; node?: string; q?: string }): ViewQuery {
  const phase = raw.phase !== undefined && (MODEL_PHASES as readonly string[]).includes(raw.phase) ? (raw.phase as ModelPhase) : null;
  const q = raw.q?.trim().toLowerCase() ?? '';
  return { page: raw.page ?? 0, size: Math.min(MAX_PAGE_SIZE, raw.size ?? DEFAULT_PAGE_SIZE), phase, node: raw.node ?? null, q: q === '' ? null : q };
}

/** Where a page is among the models matching its query. */
export interface ViewPageInfo {
  readonly page: number;
  readonly size: number;
  readonly pages: number;
  /** Models matching the query (the fleet's count is in status.models). */
  readonly matched: number;
  readonly phase: ModelPhase | null;
  readonly node: string | null;
  readonly q: string | null;
}

const RANK = new Map<ModelPhase, number>(MODEL_PHASES.map((p, i) => [p, i]));

/** The models in attention order (by phase, then as the snapshot lists them). */
export function attentionOrder(models: readonly ModelJson[]): ModelJson[] {
  return models.map((m, i) => ({ m, i })).sort((a, b) => RANK.get(a.m.phase)! - RANK.get(b.m.phase)! || a.i - b.i).map((x) => x.m);
}

function matches(m: ModelJson, q: ViewQuery): boolean {
  if (q.phase !== null && m.phase !== q.phase) return false;
  if (q.node !== null && !m.replicas.some((r) => r.node === q.node)) return false;
  if (q.q !== null && !m.name.toLowerCase().includes(q.q) && !m.aliases.some((a) => a.toLowerCase().includes(q.q!))) return false;
  return true;
}

/** The page of `ordered` (attention order) the query selects, and where it is. A page past the last is the last. */
export function selectPage(ordered: readonly ModelJson[], q: ViewQuery): { models: ModelJson[]; info: ViewPageInfo } {
  const matched = q.phase === null && q.node === null && q.q === null ? ordered : ordered.filter((m) => matches(m, q));
  const size = Number.isFinite(q.size) ? Math.max(1, q.size) : Math.max(1, matched.length);
  const pages = Math.max(1, Math.ceil(matched.length / size));
  const page = Math.min(q.page, pages - 1);
  const models = Number.isFinite(q.size) ? matched.slice(page * size, (page + 1) * size) : [...matched];
  return { models, info: { page, size: Number.isFinite(q.size) ? size : matched.length, pages, matched: matched.length, phase: q.phase, node: q.node, q: q.q } };
}

/** What changed on a client's page since the frame before (SSE `event: patch`). */
export interface ViewPatch {
  readonly at: string;
  readonly status: PageView['status'];
  readonly control: PageView['control'];
  readonly rejected: PageView['rejected'];
  /** The nodes, when they changed. */
  readonly nodes?: readonly PageNode[];
  readonly page: ViewPageInfo;
  /** The page's models now, by name, in order (the groups follow from their phases). */
  readonly order: readonly string[];
  /** Models new on the page or changed. */
  readonly upsert: readonly PageModel[];
  /** The blurb of each group on the page that has one (a phase new on the page brings its own). */
  readonly blurbs: Readonly<Record<string, string>>;
}

/**
 * One client's view of its page: what it was last sent, so the next frame carries only what changed.
 * `whole` records a whole view sent; `patch` the change to the next one (null: nothing to send).
 */
export class PageDiff {
  private sent = new Map<string, string>();
  private nodesText = '';
  private headText = '';

  whole(v: PageView): void {
    this.sent = new Map(v.groups.flatMap((g) => g.models.map((m) => [m.name, JSON.stringify(m)] as const)));
    this.nodesText = JSON.stringify(v.nodes);
    this.headText = headText(v);
  }

  patch(v: PageView): ViewPatch | null {
    const next = new Map<string, string>();
    const upsert: PageModel[] = [];
    const order: string[] = [];
    for (const g of v.groups) {
      for (const m of g.models) {
        const text = JSON.stringify(m);
        next.set(m.name, text);
        order.push(m.name);
        if (this.sent.get(m.name) !== text) upsert.push(m);
      }
    }
    const nodesText = JSON.stringify(v.nodes);
    const head = headText(v);
    const sameOrder = next.size === this.sent.size && order.every((n) => this.sent.has(n)) && sameKeysOrder(this.sent, order);
    if (upsert.length === 0 && sameOrder && nodesText === this.nodesText && head === this.headText) return null;
    const nodesChanged = nodesText !== this.nodesText;
    this.sent = next;
    this.nodesText = nodesText;
    this.headText = head;
    const blurbs: Record<string, string> = {};
    for (const g of v.groups) if (g.blurb !== null) blurbs[g.phase] = g.blurb;
    return { at: v.at, status: v.status, control: v.control, rejected: v.rejected, ...(nodesChanged ? { nodes: v.nodes } : {}), page: v.page!, order, upsert, blurbs };
  }
}

function sameKeysOrder(m: ReadonlyMap<string, string>, order: readonly string[]): boolean {
  let i = 0;
  for (const k of m.keys()) if (order[i++] !== k) return false;
  return true;
}

/** The header's parts that say more than the time (the time alone changing is no change). */
function headText(v: PageView): string {
  const { at: _at, ...status } = v.status;
  return JSON.stringify([status, v.control, v.rejected, v.page ?? null]);
}
