/**
 * A model's rollout on its card (runs in the browser; app.ts imports it): the phase and what it
 * means, in a canary step the step, the time left and both arms side by side, and the verdict with
 * its hint when the revision is held or rolled back. The words come from the controller
 * (src/ui/rollout-view.ts); this file lays them out and counts the step's time down.
 */
import type { PageRollout } from './page-shapes.js';

type Child = Node | string | null | undefined | false;
/** app.ts's element builder (attributes as text; no HTML is ever parsed). */
export type Make = (tag: string, attrs?: Record<string, string>, ...children: Child[]) => HTMLElement;

/** "1m20s left", "45s left", "2h5m left"; "ending: judged at the next pass" once the end is reached. */
export function leftText(untilMs: number, nowMs: number): string {
  const s = Math.ceil((untilMs - nowMs) / 1000);
  if (!Number.isFinite(s)) return '';
  if (s <= 0) return 'ending: judged at the next pass';
  if (s < 60) return `${s}s left`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ''} left`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60) ? `${Math.floor((s % 3600) / 60)}m` : ''} left`;
}

/** Every countdown on the page, brought to `nowMs` (the controller's clock). */
export function tickCountdowns(nowMs: number): void {
  for (const el of document.querySelectorAll<HTMLElement>('[data-until]')) el.textContent = leftText(Date.parse(el.dataset.until ?? ''), nowMs);
}

const ROWS: readonly (readonly [string, 'requests' | 'errors' | 'errorRate' | 'ttftP95' | 'tpotP95'])[] = [
  ['requests', 'requests'],
  ['errors', 'errors'],
  ['error rate', 'errorRate'],
  ['TTFT p95', 'ttftP95'],
  ['TPOT p95', 'tpotP95'],
];

const tagClass = (phase: PageRollout['phase']): string => (phase === 'held' || phase === 'rolled_back' ? 'bad' : phase === 'promoted' ? 'ok' : 'warn');

export function rolloutPanel(model: string, r: PageRollout, h: Make, nowMs: number, ago: (iso: string) => string): HTMLElement {
  const box = h('section', { class: 'rollout', 'data-rollout': r.phase, 'aria-label': `Rollout of ${model}` });
  box.append(h('h5', {}, h('span', { class: `tag ${tagClass(r.phase)}` }, r.label), 'rollout ', h('span', { class: 'legend' }, 'since ', h('span', { 'data-ago': r.since }, ago(r.since)))));
  box.append(h('p', { class: 'rollout-summary' }, r.summary));
  if (r.step !== null) {
    box.append(
      h(
        'p',
        { class: 'rollout-step' },
        h('strong', { class: 'step' }, r.step),
        r.until !== null ? ', ' : '',
        r.until !== null ? h('span', { class: 'left', 'data-until': r.until }, leftText(Date.parse(r.until), nowMs)) : null,
      ),
    );
  }
  if (r.arms) {
    const a = r.arms;
    box.append(
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'arms' },
          h('caption', { class: 'legend' }, `Both arms of ${model} over the step's window: `, h('span', { class: `verdict-so-far ${a.verdict === 'fail' ? 'bad' : a.verdict === 'pass' ? 'ok' : 'warn'}` }, a.verdictText)),
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, ''), h('th', { scope: 'col', 'data-arm': 'stable' }, 'stable ', h('code', {}, a.stable.revision)), h('th', { scope: 'col', 'data-arm': 'canary' }, 'canary ', h('code', {}, a.canary.revision)))),
          h('tbody', {}, ...ROWS.map(([label, k]) => h('tr', { 'data-figure': k }, h('th', { scope: 'row' }, label), h('td', { 'data-arm': 'stable' }, a.stable[k]), h('td', { 'data-arm': 'canary' }, a.canary[k])))),
        ),
      ),
    );
  } else if (r.phase === 'canary') box.append(h('p', { class: 'legend' }, 'no figures yet: the controller judges the step at its next pass'));
  if (r.judgedOn) box.append(h('p', { class: 'legend' }, `A step is judged on: ${r.judgedOn}.`));
  if (r.verdict) {
    const final = r.phase === 'held' || r.phase === 'rolled_back';
    const kv = h('dl', { class: 'kv verdict' });
    kv.append(h('dt', {}, final ? 'verdict' : 'so far'), h('dd', { class: final ? 'reason bad' : 'reason' }, `${r.verdict.message} [${r.verdict.code}]`));
    if (r.verdict.hint) kv.append(h('dt', {}, 'fix'), h('dd', {}, r.verdict.hint));
    box.append(kv);
  }
  return box;
}
