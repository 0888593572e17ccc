/**
 * `npm run bench:affinity-isolation` (and the first half of `npm run bench:affinity`): how many
 * prompt-cache hits `isolate_cache: true` costs, from bench/affinity-isolation.ts's simulation through
 * the router's own affinity code. The same seeded traffic (8 keys; 40 % of requests completions that
 * start with one of 4 shared 1,000-token blocks, the rest chat conversations of each key), placed with
 * every key's affinity keys shared and with each key's namespaced, on 1 to 8 replicas; counts, not
 * wall time: prompt tokens evaluated and taken from the cache, and how often a shared block was found.
 */
import { simulate, traffic, type IsolationConfig, type IsolationResult } from './affinity-isolation.js';

const BASE: Omit<IsolationConfig, 'replicas' | 'isolate' | 'seed'> = {
  slots: 2,
  keys: 8,
  blocks: 4,
  blockTokens: 1000,
  tailTokens: 100,
  blockShare: 0.4,
  firstTokens: 600,
  turnTokens: 150,
  newConversationShare: 0.3,
  requests: 4000,
  ratePerS: 1.5,
  cacheTokens: 32_000,
  genTokens: 32,
  secondsPerToken: 0.0005,
  secondsPerGenToken: 0.02,
};
const SEEDS = [1, 2, 3];

const pct = (a: number, b: number): string => `${((100 * a) / b).toFixed(1)} %`;
const sum = (rs: readonly IsolationResult[], f: (r: IsolationResult) => number): number => rs.reduce((a, r) => a + f(r), 0);

console.log(`isolate_cache cost: ${BASE.requests} requests × ${SEEDS.length} seeds, ${BASE.keys} keys, ${BASE.blocks} shared ${BASE.blockTokens}-token blocks in ${BASE.blockShare * 100} % of requests, ${BASE.slots} slots a replica, ${BASE.cacheTokens} cached tokens a replica, ${BASE.ratePerS} requests/s`);
console.log('| replicas | mode | from cache | evaluated | shared-block requests that found their block | block tokens evaluated | follow-up tokens evaluated | mean TTFT |');
console.log('|---|---|---|---|---|---|---|---|');
const ratios: string[] = [];
for (const replicas of [1, 2, 3, 4, 8]) {
  const by: Record<'shared' | 'isolated', IsolationResult[]> = { shared: [], isolated: [] };
  for (const seed of SEEDS) {
    const reqs = traffic({ ...BASE, seed, replicas, isolate: false });
    by.shared.push(simulate({ ...BASE, seed, replicas, isolate: false }, reqs));
    by.isolated.push(simulate({ ...BASE, seed, replicas, isolate: true }, reqs));
  }
  for (const mode of ['shared', 'isolated'] as const) {
    const rs = by[mode];
    console.log(`| ${replicas} | ${mode} | ${pct(sum(rs, (r) => r.cached), sum(rs, (r) => r.promptTokens))} | ${sum(rs, (r) => r.evaluated).toLocaleString('en')} | ${pct(sum(rs, (r) => r.blockHits), sum(rs, (r) => r.blockRequests))} | ${sum(rs, (r) => r.blockTokensEvaluated).toLocaleString('en')} | ${sum(rs, (r) => r.followUpEvaluated).toLocaleString('en')} | ${(1000 * sum(rs, (r) => r.meanTtftS) / rs.length).toFixed(0)} ms |`);
  }
  const ev = sum(by.isolated, (r) => r.evaluated) / sum(by.shared, (r) => r.evaluated);
  const misses = sum(by.isolated, (r) => r.blockRequests - r.blockHits) / Math.max(1, sum(by.shared, (r) => r.blockRequests - r.blockHits));
  ratios.push(`${replicas} replica${replicas === 1 ? '' : 's'}: evaluated ×${ev.toFixed(2)}, shared-block misses ×${misses.toFixed(2)}`);
}
console.log(`isolated / shared: ${ratios.join('; ')}`);
