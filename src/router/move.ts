/**
 * Whether a conversation whose replica has no free slot should wait for one there or move, weighed by
 * what each costs in delay summed over the requests it affects, pure. Staying costs the request its
 * wait for a slot on its replica, and nobody else anything (it queues behind the others there and
 * adds no work). Moving costs evaluating again, on the other replica, the prompt tokens its own
 * replica holds in its cache (the tokens of the key's last request): the request waits for that, and
 * so does each request already running on the other replica, whose slots share its compute
 * (llama-server evaluates all of a replica's slots in one batch per step). On a CPU fleet moving is
 * usually far dearer: a turn of a conversation with thousands of tokens of history takes a slot for
 * a fraction of a second when they come from the cache, and seconds when they are evaluated again.
 *
 * Both costs are estimated from what the replicas' responses said (llama-server's `timings`): a
 * replica's mean slot time (`prompt_ms + predicted_ms` per request) and its seconds per prompt token
 * evaluated (`prompt_ms / prompt_n`, over many requests). Where one is not known, there is nothing to
 * weigh, and the caller falls back to the load bound (affinity.ts).
 */
import type { Choice, ReplicaLoads, Ring } from './ring.js';

/**
 * Seconds until a request sent now to a replica with `load` requests on `slots` slots gets one: none
 * while one is free; else the `load - slots + 1` requests ahead of it must end first, and `slots` of
 * them end per `slotSeconds` (the mean time one holds a slot).
 */
export function waitSeconds(load: number, slots: number, slotSeconds: number): number {
  return load < slots ? 0 : ((load - slots + 1) * slotSeconds) / slots;
}

/**
 * The delay, in request-seconds, of evaluating `tokens` prompt tokens again at `secondsPerToken` on a
 * replica already running `running` requests: the moved request's own, and the same for each of those.
 */
export function moveSeconds(tokens: number, secondsPerToken: number, running: number): number {
  return tokens * secondsPerToken * (1 + running);
}

/** Scratch for the ring order (one request at a time runs this). */
const order: number[] = [];

/**
 * For a key whose last replica `last` (usable, no free slot) holds `tokens` prompt tokens of it: stay
 * there (`home` true) when the wait for its slot is no longer than what evaluating the tokens again
 * costs on the first other usable replica on the ring from the key with a free slot (`moveSeconds`),
 * else move there. Null when there is nothing to weigh: no other replica with a free slot, no token
 * count, or no timings yet for `last`'s slot time or for either replica's evaluation speed (the
 * target's is used, `last`'s when the target has none, as a replica that never served yet). There is
 * no cap on `last`'s queue beyond this: the wait grows with every request ahead while the move's cost
 * stays, so a replica's queue stops growing where the two meet.
 */
export function weighMove(ring: Ring, key: number, last: number, loads: ReplicaLoads, tokens: number): Choice | null {
  if (tokens <= 0) return null;
  const slotSeconds = loads.slotSeconds(last);
  if (!(slotSeconds > 0)) return null;
  let target = -1;
  for (const i of ring.order(key, order)) {
    if (i !== last && loads.usable(i) && loads.load(i) < loads.slots(i)) {
      target = i;
      break;
    }
  }
  if (target < 0) return null;
  let perToken = loads.secondsPerToken(target);
  if (!(perToken > 0)) perToken = loads.secondsPerToken(last);
  if (!(perToken > 0)) return null;
  const wait = waitSeconds(loads.load(last), loads.slots(last), slotSeconds);
  return wait <= moveSeconds(tokens, perToken, loads.load(target)) ? { index: last, home: true } : { index: target, home: false };
}

/** Weight of the newest request in a replica's estimates (about the last ten count). */
export const TIMES_WEIGHT = 0.1;

/**
 * A replica's slot time and evaluation speed, from its responses' timings: the mean slot time as an
 * exponentially weighted mean per request; the seconds per prompt token as the ratio of weighted sums
 * of `prompt_ms` and `prompt_n`, so large evaluations count by their size and a short one's fixed
 * overhead does not make the replica look slow.
 */
export class ReplicaTimes {
  /** Mean seconds a request holds a slot; 0 until the first response with timings. */
  slotSeconds = 0;
  private promptMs = 0;
  private promptN = 0;

  /** One response's timings: prompt tokens evaluated, and milliseconds evaluating and generating. */
  observe(promptN: number, promptMs: number, predictedMs: number): void {
    if (!(promptN >= 0 && promptMs >= 0 && predictedMs >= 0)) return;
    const s = (promptMs + predictedMs) / 1000;
    this.slotSeconds = this.slotSeconds === 0 ? s : this.slotSeconds + TIMES_WEIGHT * (s - this.slotSeconds);
    if (promptN > 0) {
      this.promptMs = this.promptMs * (1 - TIMES_WEIGHT) + promptMs;
      this.promptN = this.promptN * (1 - TIMES_WEIGHT) + promptN;
    }
  }

  /** Seconds per prompt token evaluated; 0 until a response evaluated any. */
  get secondsPerToken(): number {
    return this.promptN > 0 ? this.promptMs / this.promptN / 1000 : 0;
  }
}
