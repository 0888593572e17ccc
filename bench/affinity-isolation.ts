/**
 * What `isolate_cache: true` costs in prompt-cache hits (#36 N8), simulated: the same seeded multi-key
 * traffic with prompt prefixes shared across keys, placed on a model's replicas by the router's own
 * affinity code, once with every key's affinity keys shared and once with each namespaced by its key.
 * Only the traffic and the replicas are made up; the placement is the project's:
 *
 * - a request's key is `affinityKey` of its body (router/affinity.ts: a completion's first 512
 *   characters, a chat's messages up to the first user message), `isolatedKey(key, key name)` when
 *   isolated;
 * - the replica is chosen as `ReplicaChoice.affine` does (router/choose.ts): the model's `Ring`, its
 *   `StickyKeys` (the key's last replica, whether a request of it is in flight, the prompt tokens its
 *   replica holds), `chooseSticky` with the replicas' loads and their `ReplicaTimes` (router/move.ts)
 *   fed from each simulated answer; when no replica has a free slot the request waits in the router's
 *   queue and goes, oldest first, to a free slot (`freeSlotOnly`), as router/slot-queues.ts does.
 *
 * The traffic: Poisson arrivals over several API keys. A share of the requests are completions that
 * start with one of a few shared blocks (a few-shot preamble every key uses, longer than the 512
 * characters of the key) and end with a tail of their own; the rest are chat conversations of each
 * key (a first message of its own, then follow-ups carrying the history). A replica's cache: what a
 * request finds of its prompt there is its longest prefix, in whole segments (block, tail, message,
 * turn), among the prompts the replica served last, kept up to `cacheTokens` (least recently used
 * dropped first): llama-server's slots and its `--cache-ram`, simplified. Time: a request holds a slot
 * for its evaluated tokens × secondsPerToken + its generated tokens × secondsPerGenToken.
 *
 * Pure and deterministic (the tiny model's seeded PRNG; no clock): the same configuration gives the
 * same counts on any machine.
 */
import { affinityKey, chooseSticky, isolatedKey, StickyKeys, type StickyEntry } from '../src/router/affinity.js';
import { ReplicaTimes } from '../src/router/move.js';
import { Ring, type ReplicaLoads } from '../src/router/ring.js';
import { prng } from '../src/gguf/tiny-model.js';

export interface IsolationConfig {
  readonly seed: number;
  readonly replicas: number;
  /** Slots per replica (the profile's parallel). */
  readonly slots: number;
  readonly keys: number;
  /** Shared blocks, and the prompt tokens of each (the few-shot preamble every key may use). */
  readonly blocks: number;
  readonly blockTokens: number;
  /** A shared-block request's own tail, in tokens. */
  readonly tailTokens: number;
  /** Share of requests that start with a shared block (the rest are chat turns). */
  readonly blockShare: number;
  /** A chat's first message and each later turn (question and answer), in tokens. */
  readonly firstTokens: number;
  readonly turnTokens: number;
  /** Share of chat requests that open a new conversation (the rest continue one of the key's). */
  readonly newConversationShare: number;
  readonly requests: number;
  readonly ratePerS: number;
  /** Prompt tokens each replica's cache keeps. */
  readonly cacheTokens: number;
  readonly genTokens: number;
  readonly secondsPerToken: number;
  readonly secondsPerGenToken: number;
  /** Namespace every key's affinity keys (`isolate_cache: true` on every key). */
  readonly isolate: boolean;
}

export interface IsolationResult {
  readonly promptTokens: number;
  readonly evaluated: number;
  readonly cached: number;
  /** Shared-block requests, and those that found their whole block in their replica's cache. */
  readonly blockRequests: number;
  readonly blockHits: number;
  /** Prompt tokens of shared blocks evaluated (a block evaluated again on another replica). */
  readonly blockTokensEvaluated: number;
  /** Chat follow-ups, and the prompt tokens they evaluated. */
  readonly followUps: number;
  readonly followUpEvaluated: number;
  /** Mean seconds from arrival to the first token (wait + evaluation). */
  readonly meanTtftS: number;
}

interface Seg {
  readonly id: string;
  readonly tokens: number;
}

interface Req {
  readonly t: number;
  readonly keyName: string;
  readonly body: Record<string, unknown>;
  readonly path: string;
  readonly segs: readonly Seg[];
  readonly block: boolean;
  readonly followUp: boolean;
}

/** A replica's cache: prompts (as segments) it served, least recently used first. */
class PromptCache {
  private readonly entries = new Map<string, readonly Seg[]>();
  private tokens = 0;
  constructor(private readonly cap: number) {}
  /** Tokens of `segs`' longest prefix held here. */
  lookup(segs: readonly Seg[]): number {
    let best = 0;
    for (const e of this.entries.values()) {
      let n = 0;
      for (let i = 0; i < e.length && i < segs.length && e[i]!.id === segs[i]!.id; i++) n += segs[i]!.tokens;
      if (n > best) best = n;
    }
    return best;
  }
  add(segs: readonly Seg[]): void {
    const k = segs.map((s) => s.id).join('|');
    const old = this.entries.get(k);
    if (old !== undefined) this.entries.delete(k);
    else this.tokens += segs.reduce((a, s) => a + s.tokens, 0);
    this.entries.set(k, segs);
    while (this.tokens > this.cap && this.entries.size > 1) {
      const [oldest, segsOut] = this.entries.entries().next().value!;
      this.entries.delete(oldest);
      this.tokens -= segsOut.reduce((a, s) => a + s.tokens, 0);
    }
  }
}

/** The seeded traffic: the same for both modes. */
export function traffic(c: IsolationConfig): Req[] {
  const rnd = prng(c.seed);
  const blockText = (b: number): string => `Shared preamble ${b}: ${'classify the ticket as billing, outage or other; answer with one word. '.repeat(9)}`;
  const convs: { keyName: string; id: number; turns: number }[][] = Array.from({ length: c.keys }, () => []);
  const out: Req[] = [];
  let t = 0;
  for (let i = 0; i < c.requests; i++) {
    t += -Math.log(1 - rnd()) / c.ratePerS;
    const k = Math.floor(rnd() * c.keys);
    const keyName = `key-${k}`;
    if (rnd() < c.blockShare) {
      const b = Math.floor(rnd() * c.blocks);
      const prompt = `${blockText(b)}\nTicket ${i}: ...`;
      out.push({ t, keyName, path: '/v1/completions', body: { prompt }, segs: [{ id: `B${b}`, tokens: c.blockTokens }, { id: `T${i}`, tokens: c.tailTokens }], block: true, followUp: false });
      continue;
    }
    const mine = convs[k]!;
    let conv = mine.length > 0 && rnd() >= c.newConversationShare ? mine[Math.floor(rnd() * mine.length)]! : undefined;
    if (conv === undefined) {
      conv = { keyName, id: i, turns: 0 };
      mine.push(conv);
    } else conv.turns++;
    const segs: Seg[] = [{ id: `C${conv.id}:0`, tokens: c.firstTokens }];
    for (let j = 1; j <= conv.turns; j++) segs.push({ id: `C${conv.id}:${j}`, tokens: c.turnTokens });
    const body = { messages: [{ role: 'user', content: `conversation ${conv.id} of ${keyName}` }] };
    out.push({ t, keyName, path: '/v1/chat/completions', body, segs, block: false, followUp: conv.turns > 0 });
  }
  return out;
}

interface Running {
  readonly end: number;
  readonly replica: number;
  readonly entry: StickyEntry;
  readonly promptTokens: number;
}

/** One run of the traffic through the router's affinity code. */
export function simulate(c: IsolationConfig, reqs: readonly Req[] = traffic(c)): IsolationResult {
  const ids = Array.from({ length: c.replicas }, (_, i) => `r-${i}`);
  const ring = new Ring(ids);
  const sticky = new StickyKeys();
  const times = ids.map(() => new ReplicaTimes());
  const caches = ids.map(() => new PromptCache(c.cacheTokens));
  const running: Running[][] = ids.map(() => []);
  const waiting: { req: Req; key: number; entry: StickyEntry }[][] = ids.map(() => []);
  const queue: { req: Req; key: number }[] = [];
  const load = (i: number): number => running[i]!.length + waiting[i]!.length;
  const loads: ReplicaLoads & { freeOnly: boolean } = {
    freeOnly: false,
    usable: (i) => !loads.freeOnly || load(i) < c.slots,
    load,
    slots: () => c.slots,
    slotSeconds: (i) => times[i]!.slotSeconds,
    secondsPerToken: (i) => times[i]!.secondsPerToken,
  };
  const r = { promptTokens: 0, evaluated: 0, cached: 0, blockRequests: 0, blockHits: 0, blockTokensEvaluated: 0, followUps: 0, followUpEvaluated: 0, ttft: 0 };

  const start = (i: number, req: Req, entry: StickyEntry, now: number): void => {
    const total = req.segs.reduce((a, s) => a + s.tokens, 0);
    const cached = Math.min(caches[i]!.lookup(req.segs), total - 1);
    const evaluated = total - cached;
    caches[i]!.add(req.segs);
    const evalS = evaluated * c.secondsPerToken;
    const genS = c.genTokens * c.secondsPerGenToken;
    times[i]!.observe(evaluated, evalS * 1000, genS * 1000);
    r.promptTokens += total;
    r.evaluated += evaluated;
    r.cached += cached;
    r.ttft += now - req.t + evalS;
    if (req.block) {
      r.blockRequests++;
      if (cached >= c.blockTokens) r.blockHits++;
      else r.blockTokensEvaluated += c.blockTokens - cached;
    }
    if (req.followUp) {
      r.followUps++;
      r.followUpEvaluated += evaluated;
    }
    running[i]!.push({ end: now + evalS + genS, replica: i, entry, promptTokens: total });
  };
  const dispatch = (req: Req, key: number, now: number, freeSlotOnly: boolean): void => {
    const seen = sticky.get(key);
    const last = seen === undefined ? -1 : ids.indexOf(seen.id);
    loads.freeOnly = freeSlotOnly;
    const choice = chooseSticky(ring, key, { last, shared: seen !== undefined && seen.active > 0, tokens: last >= 0 ? seen!.tokens : 0, freeSlotOnly }, loads);
    loads.freeOnly = false;
    const i = choice.index;
    if (i < 0) {
      queue.unshift({ req, key });
      return;
    }
    const entry = sticky.set(key, ids[i]!);
    entry.active++;
    if (running[i]!.length < c.slots) start(i, req, entry, now);
    else waiting[i]!.push({ req, key, entry });
  };
  const anyFree = (): boolean => ids.some((_, i) => load(i) < c.slots);

  let next = 0;
  for (;;) {
    let endAt = Infinity;
    let endI = -1;
    for (let i = 0; i < ids.length; i++) for (const x of running[i]!) if (x.end < endAt) [endAt, endI] = [x.end, i];
    const arriveAt = next < reqs.length ? reqs[next]!.t : Infinity;
    if (endAt === Infinity && arriveAt === Infinity) break;
    if (arriveAt <= endAt) {
      const req = reqs[next++]!;
      const prefix = affinityKey(req.path, req.body)!;
      const key = c.isolate ? isolatedKey(prefix, req.keyName) : prefix;
      if (queue.length > 0 || !anyFree()) queue.push({ req, key });
      else dispatch(req, key, arriveAt, false);
      continue;
    }
    const list = running[endI]!;
    const done = list.splice(list.findIndex((x) => x.end === endAt), 1)[0]!;
    done.entry.active--;
    if (done.entry.id === ids[endI]) done.entry.tokens = done.promptTokens;
    const w = waiting[endI]!.shift();
    if (w !== undefined) start(endI, w.req, w.entry, endAt);
    while (queue.length > 0 && anyFree()) {
      const q = queue.shift()!;
      dispatch(q.req, q.key, endAt, true);
    }
  }
  const { ttft, ...counts } = r;
  return { ...counts, meanTtftS: ttft / reqs.length };
}
