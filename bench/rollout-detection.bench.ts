/**
 * bench:rollout-detection — how long a canary takes to detect a regression and undo it, how many
 * requests reach the bad revision meanwhile, and whether a good revision is promoted and when (#34),
 * against Flagger's model for the same settings. Simulated (bench/rollout-sim.ts): seeded traffic
 * through the real split, windows, verdict, step outcome and wake schedule; simulated time and counts
 * only, so the figures do not move with the machine. Prints, never asserts.
 *
 * Flagger's model (docs/gitbook/usage/deployment-strategies.md of fluxcd/flagger): it checks the
 * metrics every `interval`, counts failed checks without moving the weight, and rolls back when they
 * reach `threshold` — "interval * threshold"; it promotes after "interval * (maxWeight / stepWeight)".
 * Compared at the same interval, threshold 5 (its tutorials' value; its code's default is 1, its
 * README's example 10), stepWeight 10 and maxWeight 50, and taken at its best: every check fails from
 * the first. Its requests to the bad revision are stepWeight × the arrivals over interval × threshold.
 *
 * Tables: the regressions at 5 requests/s; the good revision with and without conversations under
 * way (the cold canary's cache misses); by request rate; and with poll passes on top of the wakes.
 *
 *   npm run bench:rollout-detection        (BENCH_SEEDS=N: seeds per row, default 20)
 */
import type { CanarySpec } from '../src/rollout/types.js';
import { BASELINE, simulateCanary, type Revision, type SimConfig, type SimResult } from './rollout-sim.js';

const SEEDS = Number(process.env['BENCH_SEEDS'] ?? 20);
/** The issue's example canary. */
const CANARY: CanarySpec = { steps: [0.1, 0.5], intervalMs: 120_000, minRequests: 30, maxErrorRateIncrease: 0.02, maxTtftRatio: 1.5, maxTpotRatio: 1.5, onInconclusive: 'hold' };
const RATE = 5;
const FLAGGER = { threshold: 5, stepWeight: 0.1, maxWeight: 0.5 };
const flaggerRollbackMs = (c: CanarySpec): number => c.intervalMs * FLAGGER.threshold;
const flaggerPromoteMs = (c: CanarySpec): number => c.intervalMs * Math.round(FLAGGER.maxWeight / FLAGGER.stepWeight);

const REGRESSIONS: readonly (readonly [string, Revision])[] = [
  ['errors 31%', { ...BASELINE, errorRate: 0.31 }],
  ['errors 5%', { ...BASELINE, errorRate: 0.05 }],
  ['TTFT 2.4×', { ...BASELINE, ttftFactor: 2.4 }],
  ['TPOT 2×', { ...BASELINE, tpotFactor: 2 }],
];

function runSeeds(o: Omit<SimConfig, 'seed'>): SimResult[] {
  const out: SimResult[] = [];
  for (let seed = 1; seed <= SEEDS; seed++) out.push(simulateCanary({ ...o, seed }));
  return out;
}

const sorted = (xs: readonly number[]): number[] => [...xs].sort((a, b) => a - b);
const median = (xs: readonly number[]): number => {
  const s = sorted(xs);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const secs = (ms: number): string => (Number.isNaN(ms) ? '–' : `${Math.round(ms / 1000)} s`);
const range = (xs: readonly number[], f: (n: number) => string): string => (xs.length === 0 ? '–' : `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`);
const pct = (f: number): string => `${(f * 100).toFixed(1)}%`;
const whole = (n: number): string => `${Math.round(n)}`;

/** "12 rolled back, 5 promoted, 3 held". */
function outcomes(rs: readonly SimResult[]): string {
  const n = (k: SimResult['outcome']): number => rs.filter((r) => r.outcome === k).length;
  const parts = [['rolled back', n('rolled_back')], ['promoted', n('promoted')], ['held', n('held')], ['undecided', n('none')]] as const;
  return parts.filter(([, c]) => c > 0).map(([w, c]) => `${c} ${w}`).join(', ');
}

/** What the rollbacks failed on, and at which step: "error rate at 10% ×18, TTFT at 50% ×2". */
function failedOn(rs: readonly SimResult[]): string {
  const count = new Map<string, number>();
  for (const r of rs) {
    if (r.outcome !== 'rolled_back' && r.outcome !== 'held') continue;
    const what = /: (error rate|TTFT|time per output token|\d+ of \d+ requests)/.exec(r.reason ?? '')?.[1] ?? '?';
    const k = `${/^\d/.test(what) ? 'too few requests' : what === 'time per output token' ? 'TPOT' : what} at ${Math.round((CANARY.steps[r.step] ?? 1) * 100)}%`;
    count.set(k, (count.get(k) ?? 0) + 1);
  }
  return [...count].map(([k, c]) => `${k} ×${c}`).join(', ') || '–';
}

const base = { canary: CANARY, ratePerS: RATE, stable: BASELINE, countArrivalsUntilMs: flaggerRollbackMs(CANARY) } as const;
const flaggerBad = (rs: readonly SimResult[]): number => median(rs.map((r) => FLAGGER.stepWeight * r.arrivalsUntil));

console.log(`## Canary settings: steps ${CANARY.steps.map((s) => `${s * 100}%`).join(', ')}, interval ${CANARY.intervalMs / 1000} s, min_requests ${CANARY.minRequests}, max_error_rate_increase ${CANARY.maxErrorRateIncrease * 100}%, max_ttft_ratio ${CANARY.maxTtftRatio}, max_tpot_ratio ${CANARY.maxTpotRatio}, on_inconclusive ${CANARY.onInconclusive}`);
console.log(`Traffic: ${RATE} requests/s (Poisson), conversations under way for 5 min before the first step, ${SEEDS} seeds per row; passes at canaryDue's wakes only.`);
console.log(`Flagger's model at the same interval: threshold ${FLAGGER.threshold} → rolled back at ${secs(flaggerRollbackMs(CANARY))}; stepWeight ${FLAGGER.stepWeight * 100}%, maxWeight ${FLAGGER.maxWeight * 100}% → promoted at ${secs(flaggerPromoteMs(CANARY))}.\n`);

console.log('### Regressions: detected and rolled back (median (min–max) over the seeds)\n');
console.log('| new revision | outcome | failed on | rolled back at | ÷ Flagger interval × threshold | after min_requests on both arms | its last request ended | requests to it | share of all requests | of them failed | failed, share of all requests | Flagger: requests to it |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
const examples: string[] = [];
for (const [name, rev] of REGRESSIONS) {
  const rs = runSeeds({ ...base, candidate: rev });
  const back = rs.filter((r) => r.outcome === 'rolled_back');
  const at = back.map((r) => r.concludedAtMs!);
  const cells = [
    name,
    outcomes(rs),
    failedOn(rs),
    range(at, secs),
    range(at.map((t) => t / flaggerRollbackMs(CANARY)), (x) => x.toFixed(2)),
    range(back.map((r) => r.concludedAtMs! - (r.minRequestsAtMs[r.minRequestsAtMs.length - 1] ?? r.stepStartsMs[r.stepStartsMs.length - 1]!)), secs),
    range(back.map((r) => r.lastCandidateEndMs ?? r.concludedAtMs!), secs),
    range(back.map((r) => r.candidateRequests), whole),
    range(back.map((r) => r.candidateRequests / Math.max(1, r.requests)), pct),
    range(back.map((r) => r.candidateFailed), whole),
    range(back.map((r) => r.candidateFailed / Math.max(1, r.requests)), pct),
    whole(flaggerBad(rs)),
  ];
  console.log(`| ${cells.join(' | ')} |`);
  if (rs[0]?.reason) examples.push(`- ${name} (seed 1): ${rs[0].reason}`);
}
console.log('\nThe first seed\'s reason for each:\n');
for (const e of examples) console.log(e);

console.log('\n### The good revision (the control: the same answers as the stable one)\n');
console.log('| traffic | outcome | rolled back or held on | promoted at | ÷ Flagger\'s promotion | requests to it until then |');
console.log('|---|---|---|---|---|---|');
const controls: readonly (readonly [string, Partial<SimConfig>])[] = [
  ['conversations under way when the canary begins (the default)', {}],
  ['no conversation under way at the start (no warm-up)', { warmupMs: 0 }],
  ['single requests only (no follow-ups)', { newConversationShare: 1 }],
];
for (const [name, extra] of controls) {
  const rs = runSeeds({ ...base, candidate: BASELINE, ...extra });
  const up = rs.filter((r) => r.outcome === 'promoted');
  const at = up.map((r) => r.concludedAtMs!);
  console.log(`| ${name} | ${outcomes(rs)} | ${failedOn(rs)} | ${range(at, secs)} | ${range(at.map((t) => t / flaggerPromoteMs(CANARY)), (x) => x.toFixed(2))} | ${range(up.map((r) => r.candidateRequests), whole)} |`);
}
const control = runSeeds({ ...base, candidate: BASELINE });
const falseBack = control.find((r) => r.outcome === 'rolled_back');
if (falseBack) console.log(`\nA good revision rolled back (seed ${control.indexOf(falseBack) + 1}): ${falseBack.reason}`);

console.log('\n### By request rate (errors 31% and the good revision)\n');
console.log('| requests/s | 31%: outcome | rolled back at | ÷ Flagger | requests to it | of them failed | good: outcome | promoted at |');
console.log('|---|---|---|---|---|---|---|---|');
for (const rate of [1, 2.5, 5, 20]) {
  const bad = runSeeds({ ...base, ratePerS: rate, candidate: REGRESSIONS[0]![1] });
  const good = runSeeds({ ...base, ratePerS: rate, candidate: BASELINE });
  const back = bad.filter((r) => r.outcome === 'rolled_back');
  const at = back.map((r) => r.concludedAtMs!);
  const up = good.filter((r) => r.outcome === 'promoted').map((r) => r.concludedAtMs!);
  console.log(
    `| ${rate} | ${outcomes(bad)} | ${range(at, secs)} | ${range(at.map((t) => t / flaggerRollbackMs(CANARY)), (x) => x.toFixed(2))} | ${range(back.map((r) => r.candidateRequests), whole)} | ${range(back.map((r) => r.candidateFailed), whole)} | ${outcomes(good)} | ${range(up, secs)} |`,
  );
}

console.log('\n### With poll passes too (poll_interval 30 s, the default, the first 15 s into the step)\n');
console.log('| new revision | outcome | failed on | rolled back at | ÷ Flagger | requests to it | of them failed | promoted at |');
console.log('|---|---|---|---|---|---|---|---|');
for (const [name, rev] of [['good', BASELINE], REGRESSIONS[0]!, REGRESSIONS[1]!] as const) {
  const rs = runSeeds({ ...base, candidate: rev, pollMs: 30_000, pollFirstMs: 15_000 });
  const back = rs.filter((r) => r.outcome === 'rolled_back');
  const at = back.map((r) => r.concludedAtMs!);
  const up = rs.filter((r) => r.outcome === 'promoted').map((r) => r.concludedAtMs!);
  console.log(
    `| ${name} | ${outcomes(rs)} | ${failedOn(rs)} | ${range(at, secs)} | ${range(at.map((t) => t / flaggerRollbackMs(CANARY)), (x) => x.toFixed(2))} | ${range(back.map((r) => r.candidateRequests), whole)} | ${range(back.map((r) => r.candidateFailed), whole)} | ${range(up, secs)} |`,
  );
}
