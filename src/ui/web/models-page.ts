/**
 * The models' part of the status page's feed (runs in the browser; app.ts imports it): the page,
 * phase and search asked for (the view stream is opened for that page: src/ui/view-page.ts), and
 * a `patch` frame applied to the view the page holds.
 */
import type { PageModel, PageView, ViewPatch } from './page-shapes.js';

/** The page of models asked for (the view stream sends that page, then its changes). */
export const query = { page: 0, size: 100, phase: '', q: '' };

export function queryString(): string {
  const p = new URLSearchParams({ page: String(query.page), size: String(query.size) });
  if (query.phase) p.set('phase', query.phase);
  if (query.q.trim()) p.set('q', query.q.trim());
  return `?${p.toString()}`;
}

/** The view after a patch: the page's models in the patch's order, the changed ones replaced. */
export function applyPatch(v: PageView, p: ViewPatch): PageView {
  const byName = new Map<string, PageModel>();
  for (const g of v.groups) for (const m of g.models) byName.set(m.name, m);
  for (const m of p.upsert) byName.set(m.name, m);
  const groups: PageView['groups'] = [];
  for (const name of p.order) {
    const m = byName.get(name);
    if (!m) continue;
    const last = groups[groups.length - 1];
    if (last && last.phase === m.phase) last.models.push(m);
    else groups.push({ phase: m.phase, blurb: p.blurbs[m.phase] ?? null, models: [m] });
  }
  return { ...v, at: p.at, status: p.status, control: p.control, rejected: p.rejected, nodes: p.nodes ?? v.nodes, page: p.page, groups };
}

/** The search box, the phase and the pager: each change asks for another page (`changed`). */
export function wireModelsFilter(changed: () => void): void {
  const el = (id: string): HTMLElement => document.getElementById(id)!;
  const refilter = (): void => {
    query.q = (el('models-search') as HTMLInputElement).value;
    query.phase = (el('models-phase') as HTMLSelectElement).value;
    query.page = 0;
    changed();
  };
  el('models-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    refilter();
  });
  el('models-phase').addEventListener('change', refilter);
  let timer: ReturnType<typeof setTimeout> | null = null;
  el('models-search').addEventListener('input', () => {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(refilter, 300);
  });
  el('models-prev').addEventListener('click', () => {
    query.page = Math.max(0, query.page - 1);
    changed();
  });
  el('models-next').addEventListener('click', () => {
    query.page += 1;
    changed();
  });
}
