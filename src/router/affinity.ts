/**
 * Prefix affinity, pure: the key of a request's prompt prefix, a hash ring of a model's ready
 * replicas, and the choice on it by consistent hashing with bounded load.
 *
 * The key is taken from the body the router has already parsed (to read `model`), without reading
 * anything else:
 * - chat completions: the messages up to and including the first user message (roles and text; for a
 *   typical chat, the system prompt and the opening question or document), which every later turn of
 *   the conversation repeats unchanged;
 * - completions: the first PROMPT_KEY_CHARS characters of the prompt (or the first PROMPT_KEY_TOKENS
 *   tokens of a token prompt);
 * - anything else (embeddings, …): no key, the request goes least-busy.
 * At most KEY_CHARS characters are hashed per request (a huge first message costs no more).
 *
 * The choice:
 * - a key served before goes back to the replica that served it last (`StickyKeys`: its prompt cache is
 *   there) while that replica has a free slot. When it has none, the move is weighed (move.ts): the
 *   first replica on the ring from the key with a free slot is the alternative, and the request moves
 *   there only when the wait for a slot on its own replica (the requests ahead of it there × the
 *   replica's mean slot time / its slots) is longer than evaluating again, on the other replica, the
 *   prompt tokens of the key's last request (its seconds per prompt token), both as the replicas'
 *   responses' `timings` said. So a conversation with thousands of tokens cached waits for its
 *   replica's slot, which is usually far shorter than evaluating them again on a CPU, and a short one
 *   moves to the free slot. Where the costs are not known (no timings from the replicas yet, no token
 *   count for the key, unknown slots), the key stays while its replica is under max(its slots,
 *   ⌈STAY_LOAD_FACTOR × (total load + 1) / replicas⌉). A key that already has a request in flight is
 *   not one conversation (its turns come one at a time) but a prefix shared by many (the same system
 *   prompt and first message): it stays only under the LOAD_FACTOR bound, so a popular prefix still
 *   spreads;
 * - otherwise (`choose`), walking the ring clockwise from the key, the first replica that is usable and
 *   under max(its slots, ⌈LOAD_FACTOR × (total load + 1) / replicas⌉) (consistent hashing with bounded
 *   loads: Mirrokni, Thorup, Zadimoghaddam), and the key is remembered there.
 * So new conversations spread by the ring within the bound, and a conversation moves only when its
 * replica is gone or its wait there costs more than its cache is worth, once (it then stays where its
 * cache now is).
 * Removing a replica moves only the keys it held (to the next replica on the ring); adding one takes
 * only new keys that land on its points.
 *
 * "A request never waits in a busy replica's queue while another replica has a free slot and
 * affinity allows the move" (issue #19) holds with "allows" meaning: for a key served before (one
 * conversation), its move is weighed cheaper than the wait (move.ts), or, where it cannot be weighed,
 * its replica is at max(slots, the STAY_LOAD_FACTOR bound); for a new or shared key, its ring home is
 * at max(slots, the LOAD_FACTOR bound) (a new key has no cache anywhere, but the ring keeps its
 * placement the same across routers, so it takes its home's llama-server queue while under the bound).
 */
import { weighMove } from './move.js';
import { FNV_OFFSET, fnv, mix, type Choice, type ReplicaLoads, type Ring } from './ring.js';

/** Characters of a completion prompt that make its key. */
export const PROMPT_KEY_CHARS = 512;
/** Tokens of a token-array completion prompt that make its key. */
export const PROMPT_KEY_TOKENS = 128;
/** Most characters hashed for one key. */
export const KEY_CHARS = 65_536;
/** How far above the average load a replica may go before affinity moves a request on (the bound). */
export const LOAD_FACTOR = 1.25;
/**
 * The bound for a key already served and not in flight (a conversation's next turn; its prompt cache
 * is on that replica) where its move cannot be weighed (move.ts: no timings or token count yet): it
 * stays there up to twice the average load, since moving it costs evaluating its whole history again
 * on another replica. (With three replicas a factor of 3 would never move anything: one replica
 * holding every request is exactly 3 × the average.)
 */
export const STAY_LOAD_FACTOR = 2;
/** Keys remembered per model (least recently used forgotten first). */
export const STICKY_KEYS = 65_536;

class KeyHash {
  h = FNV_OFFSET;
  left = KEY_CHARS;
  add(s: string): void {
    if (this.left <= 0) return;
    this.h = fnv(this.h, s, this.left);
    this.left -= s.length;
    // a separator, so ["ab","c"] and ["a","bc"] differ
    this.h = Math.imul(this.h ^ 0x1f, 0x01000193);
  }
}

/** The text of a chat message's content: a string, or an array of parts ({type:'text', text}, images by URL). */
function addContent(k: KeyHash, content: unknown): void {
  if (typeof content === 'string') {
    k.add(content);
    return;
  }
  if (!Array.isArray(content)) return;
  for (const part of content as unknown[]) {
    if (typeof part !== 'object' || part === null) continue;
    const p = part as { text?: unknown; image_url?: unknown };
    if (typeof p.text === 'string') k.add(p.text);
    else if (typeof p.image_url === 'object' && p.image_url !== null) {
      const url = (p.image_url as { url?: unknown }).url;
      if (typeof url === 'string') k.add(url);
    }
  }
}

/** True for the paths whose responses carry prompt token counts (chat and completions). */
export function isPromptPath(path: string): boolean {
  return kindOf(path) !== null;
}

/** Which kind of request a path is, for the key (query strings ignored). */
function kindOf(path: string): 'chat' | 'completion' | null {
  if (path.startsWith('/v1/chat/completions') && (path.length === 20 || path[20] === '?')) return 'chat';
  if (path.startsWith('/v1/completions') && (path.length === 15 || path[15] === '?')) return 'completion';
  return null;
}

/**
 * The affinity key of a request (a ring position), or null when it has none (not a chat or completion
 * request, or no prompt to key on). `body` is the parsed JSON object.
 */
export function affinityKey(path: string, body: Readonly<Record<string, unknown>>): number | null {
  const kind = kindOf(path);
  if (kind === 'chat') {
    const messages = body['messages'];
    if (!Array.isArray(messages) || messages.length === 0) return null;
    const k = new KeyHash();
    for (const m of messages as unknown[]) {
      if (typeof m !== 'object' || m === null) continue;
      const msg = m as { role?: unknown; content?: unknown };
      const role = typeof msg.role === 'string' ? msg.role : '';
      k.add(role);
      addContent(k, msg.content);
      if (role === 'user' || k.left <= 0) break;
    }
    return mix(k.h);
  }
  if (kind === 'completion') {
    let prompt = body['prompt'];
    if (Array.isArray(prompt)) {
      if (prompt.length === 0) return null;
      if (typeof prompt[0] === 'number') {
        const k = new KeyHash();
        k.add(prompt.slice(0, PROMPT_KEY_TOKENS).join(','));
        return mix(k.h);
      }
      prompt = prompt[0];
      if (Array.isArray(prompt)) {
        const k = new KeyHash();
        k.add(prompt.slice(0, PROMPT_KEY_TOKENS).join(','));
        return mix(k.h);
      }
    }
    if (typeof prompt !== 'string' || prompt.length === 0) return null;
    return mix(fnv(FNV_OFFSET, prompt, PROMPT_KEY_CHARS));
  }
  return null;
}

/**
 * A request's affinity key namespaced by its API key's name (`isolate_cache: true` in
 * access/keys.yaml): the same prompt prefix sent with another key has another key here, so it lands
 * on its own point of the ring and its own sticky entry, never another key's bucket.
 */
export function isolatedKey(key: number, keyName: string): number {
  return mix(fnv(Math.imul(key ^ 0x5bd1e995, 0x01000193), keyName, KEY_CHARS));
}

/** The bounded-load cap for a request joining `totalLoad` others on `replicas` usable replicas. */
export function loadCap(totalLoad: number, replicas: number, factor = LOAD_FACTOR): number {
  return Math.ceil((factor * (totalLoad + 1)) / replicas);
}

/**
 * A key's last replica, its requests in flight (a conversation has one turn in flight at a time), and
 * the prompt tokens of its last request served there (evaluated + from cache: what that replica's
 * cache now holds of it; 0 when not known).
 */
export class StickyEntry {
  active = 0;
  tokens = 0;
  constructor(public id: string) {}
}

/**
 * Where each key was served last, for up to `max` keys (the least recently used forgotten first; a
 * Map keeps insertion order, and a key used again is moved to the end).
 */
export class StickyKeys {
  private readonly m = new Map<number, StickyEntry>();
  constructor(private readonly max = STICKY_KEYS) {}
  get size(): number {
    return this.m.size;
  }
  get(key: number): StickyEntry | undefined {
    return this.m.get(key);
  }
  /** Records that `key` went to replica `id`; returns its entry (the same object while remembered). */
  set(key: number, id: string): StickyEntry {
    let e = this.m.get(key);
    if (e === undefined) e = new StickyEntry(id);
    else {
      if (e.id !== id) e.tokens = 0;
      e.id = id;
      this.m.delete(key);
    }
    this.m.set(key, e);
    if (this.m.size > this.max) this.m.delete(this.m.keys().next().value!);
    return e;
  }
}

/** A key's state for `chooseSticky`. */
export interface Sticky {
  /** The replica that served it last (an index into the ring's ids), or -1. */
  readonly last: number;
  /** True when a request of the key is already in flight: a prefix shared by many, not one conversation. */
  readonly shared: boolean;
  /** Prompt tokens of its last request (what `last` holds of it in its cache); 0 when not known. */
  readonly tokens: number;
  /**
   * True for a request that waited in the router's queue: it goes to a replica with a free slot, or
   * to `last` where waiting for a slot there costs less than moving (never by the load bound alone).
   */
  readonly freeSlotOnly: boolean;
}

/** `loads` with only the replicas that have a free slot usable. */
function withFreeSlot(loads: ReplicaLoads): ReplicaLoads {
  return {
    usable: (i) => loads.usable(i) && loads.load(i) < loads.slots(i),
    load: (i) => loads.load(i),
    slots: (i) => loads.slots(i),
    slotSeconds: (i) => loads.slotSeconds(i),
    secondsPerToken: (i) => loads.secondsPerToken(i),
  };
}

/**
 * The key's replica: the one that served it last while it has a free slot; when it has none, as
 * `weighMove` decides (stay and wait, or move to the first replica on the ring with a free slot); where
 * that cannot be weighed (costs unknown, a shared key), while it is under max(its slots, ⌈factor ×
 * (total + 1) / replicas⌉) (STAY_LOAD_FACTOR for one conversation, LOAD_FACTOR for a shared key);
 * else `choose`. `home` is true when the key stays where it was (or, for a new key, lands on its own
 * replica on the ring).
 */
export function chooseSticky(ring: Ring, key: number, s: Sticky, loads: ReplicaLoads): Choice {
  const last = s.last;
  const free = s.freeSlotOnly ? withFreeSlot(loads) : loads;
  if (last >= 0 && loads.usable(last)) {
    const slots = loads.slots(last);
    const load = loads.load(last);
    if (slots !== Infinity && load < slots) return { index: last, home: true };
    if (!s.shared && slots !== Infinity) {
      const w = weighMove(ring, key, last, loads, s.tokens);
      if (w !== null) return w;
    }
    if (!s.freeSlotOnly) {
      let usable = 0;
      let total = 0;
      for (let i = 0; i < ring.ids.length; i++) {
        if (!loads.usable(i)) continue;
        usable++;
        total += loads.load(i);
      }
      const cap = loadCap(total, usable, s.shared ? LOAD_FACTOR : STAY_LOAD_FACTOR);
      if (load < (slots === Infinity ? cap : Math.max(slots, cap))) return { index: last, home: true };
    }
    const c = choose(ring, key, free);
    return { index: c.index, home: c.index === last };
  }
  const c = choose(ring, key, free);
  return last >= 0 ? { index: c.index, home: false } : c;
}

/**
 * The replica for `key`: the first on the ring from the key that is usable and under its limit
 * (max(slots, cap); cap alone where slots are unknown). When every usable replica is at its limit
 * (cannot happen while the caller only sends with a free slot somewhere), the least loaded usable one.
 */
export function choose(ring: Ring, key: number, loads: ReplicaLoads): Choice {
  const n = ring.ids.length;
  let usable = 0;
  let total = 0;
  for (let i = 0; i < n; i++) {
    if (!loads.usable(i)) continue;
    usable++;
    total += loads.load(i);
  }
  if (usable === 0) return { index: -1, home: false };
  const cap = loadCap(total, usable);
  const len = ring.points.length;
  const seen = new Uint8Array(n);
  let visited = 0;
  let first = true;
  let fallback = -1;
  let fallbackLoad = Infinity;
  for (let i = ring.start(key), steps = 0; steps < len && visited < n; steps++, i = i + 1 === len ? 0 : i + 1) {
    const o = ring.owners[i]!;
    if (seen[o] !== 0) continue;
    seen[o] = 1;
    visited++;
    if (!loads.usable(o)) continue;
    const load = loads.load(o);
    const slots = loads.slots(o);
    const limit = slots === Infinity ? cap : Math.max(slots, cap);
    if (load < limit) return { index: o, home: first };
    first = false;
    if (load < fallbackLoad) {
      fallback = o;
      fallbackLoad = load;
    }
  }
  return { index: fallback, home: false };
}
