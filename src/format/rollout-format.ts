/**
 * A model's rollout as `llmgw ctl` prints it (#34). Pure functions of the admin API's JSON; times are
 * relative to the answer's `at`, so the same answer always prints the same text.
 *
 * - `stepText`: where a canary stands in a few words ("canary 10% (step 1/2), 1m20s left"), as
 *   `ctl status` and `ctl models` show it;
 * - `renderRollout`: `ctl rollout MODEL` — the phase, both revisions, the step, its share and the time
 *   left, both arms' live figures side by side, the verdict with its hint, and what an operator can do.
 */
import { printable } from '../errors/catalogue.js';
import { percent } from '../rollout/verdict.js';
import type { ArmFiguresJson, RolloutJson, RolloutOneJson, RolloutOverrideJson } from '../wire/shape.js';
import { relative, shortDuration } from './time-words.js';


const short = (digest: string): string => digest.slice(0, 12);

/** The time left in the step: "1m20s left", or that its interval is over and the next pass judges it. */
export function timeLeft(until: string | null, at: string): string | null {
  if (until === null) return null;
  const ms = Date.parse(until) - Date.parse(at);
  if (!Number.isFinite(ms)) return null;
  return ms >= 1000 ? `${shortDuration(ms)} left` : 'interval over, judged at the next pass';
}

/** A canary step in a few words: "canary 10% (step 1/2), 1m20s left"; null outside the canary phase. */
export function stepText(r: RolloutJson, at: string): string | null {
  if (r.phase !== 'canary' || r.step === null) return null;
  const of = r.steps?.length ? `/${r.steps.length}` : '';
  const share = r.share !== null ? `${percent(r.share)} ` : '';
  const left = timeLeft(r.until, at);
  return `canary ${share}(step ${r.step + 1}${of})${left ? `, ${left}` : ''}`;
}

const ms = (v: number | null): string => (v === null ? '-' : `${Math.round(v)} ms`);

/** Both arms side by side: requests, errors, error rate, TTFT p95, TPOT p95. */
export function armsTable(stable: ArmFiguresJson, canary: ArmFiguresJson, indent = ''): string {
  const rows: (readonly [string, string, string])[] = [
    ['', 'STABLE', 'CANARY'],
    ['requests', String(stable.requests), String(canary.requests)],
    ['errors', String(stable.errors), String(canary.errors)],
    ['error rate', stable.requests ? percent(stable.errorRate) : '-', canary.requests ? percent(canary.errorRate) : '-'],
    ['TTFT p95', ms(stable.ttftP95Ms), ms(canary.ttftP95Ms)],
    ['TPOT p95', ms(stable.tpotP95Ms), ms(canary.tpotP95Ms)],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  return rows.map(([k, a, b]) => `${indent}${k.padEnd(w0)}  ${a.padEnd(w1)}  ${b}`.trimEnd()).join('\n');
}

const VERDICT_WORDS: Readonly<Record<NonNullable<RolloutJson['arms']>['verdict'], string>> = {
  pass: 'pass so far (a pass counts only at the interval\'s end)',
  fail: 'FAIL (the controller rolls it back at its next pass)',
  inconclusive: 'inconclusive so far (too few requests on an arm)',
};

/** `llmgw ctl rollout MODEL`. */
export function renderRollout(one: RolloutOneJson): string {
  const { model, at } = one;
  const r = one.rollout;
  if (r === null) return `${model}: no rollout; revision ${short(one.digest)} serves (a rollout begins when a definition with a \`rollout:\` block changes)`;
  const head: [string, string][] = [];
  head.push(['model', model]);
  head.push(['revision', `${short(r.digest)} under test; ${short(r.stableDigest)} is the stable revision`]);
  const steps = r.steps?.length ? r.steps.map(percent).join(' → ') : null;
  switch (r.phase) {
    case 'checking':
      head.push(['phase', `checking since ${relative(r.since, at)}: its checks run on its first replica; no user request reaches it`]);
      break;
    case 'canary':
      head.push(['phase', `${stepText(r, at) ?? 'canary'} (since ${relative(r.since, at)}); the stable revision takes the rest`]);
      break;
    case 'held':
      head.push(['phase', `HELD since ${relative(r.since, at)}: the new revision takes no request until an operator decides`]);
      break;
    case 'rolled_back':
      head.push(['phase', `ROLLED BACK ${relative(r.since, at)}: the stable revision serves`]);
      break;
    case 'promoted':
      head.push(['phase', `promoted ${relative(r.since, at)}: it replaces the stable revision's replicas surge-first`]);
      break;
  }
  if (steps) head.push(['steps', steps]);
  // one column of labels, the arms table's ('error rate') included
  const w = Math.max(...head.map(([k]) => k.length), 'error rate'.length);
  const out = head.map(([k, v]) => `${k.padEnd(w)}  ${v}`);
  if (r.phase === 'canary') {
    out.push('');
    if (r.arms) {
      out.push(armsTable(r.arms.stable, r.arms.canary));
      out.push(`${'so far'.padEnd(w)}  ${VERDICT_WORDS[r.arms.verdict]}`);
    } else {
      out.push('no figures yet: the controller judges both arms at each pass');
    }
  }
  if (r.verdict) {
    out.push('', `${'verdict'.padEnd(w)}  ${printable(r.verdict.message)} [${r.verdict.code}]`);
    if (r.verdict.hint) out.push(`${'hint'.padEnd(w)}  ${printable(r.verdict.hint)}`);
  }
  const can: string[] = [];
  if (r.phase !== 'promoted') can.push(`llmgw ctl rollout promote ${model}`);
  if (r.phase === 'checking' || r.phase === 'canary' || r.phase === 'held') can.push(`llmgw ctl rollout abort ${model}`);
  if (r.phase === 'held' || r.phase === 'rolled_back') can.push(`llmgw ctl retry ${model}`);
  if (can.length) out.push('', `${'decide'.padEnd(w)}  ${can.join('  |  ')}`);
  return out.join('\n');
}

/** What `llmgw ctl rollout promote|abort MODEL` prints: the answer's message, and the verdict the rollout carries after it. */
export function renderOverride(o: RolloutOverrideJson): string {
  const verdict = o.rollout.verdict ? `\nverdict: ${printable(o.rollout.verdict.message)} [${o.rollout.verdict.code}]` : '';
  return `${printable(o.message)}${verdict}`;
}
