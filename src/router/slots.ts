/**
 * The background refresh of what replicas say about their slots (llama-server's GET /slots, on by
 * default; `--no-slots` turns it off): every SLOTS_REFRESH_MS, each replica this router used in the
 * last ACTIVE_MS is asked, and the slots busy beyond this router's own in-flight requests on it are
 * taken as other routers' load (`Upstream.external`), which the replica choice adds to its own count.
 * So several router instances in front of the same replicas balance sensibly.
 *
 * A reading can race the end of a response (the slot is still processing in llama-server's answer,
 * while the response has already ended here), so the smaller of the last two readings counts: load
 * that is really there persists. A replica that answers /slots with 404 or 501 (disabled) is not asked
 * again for UNSUPPORTED_RETRY_MS; other failures count as no outside load.
 */
import { readSlots } from '../engine-api/slots.js';
import type { Upstream, Upstreams } from './upstreams.js';

export { readSlots } from '../engine-api/slots.js';

export const SLOTS_REFRESH_MS = 1000;
/** Replicas unused for this long are not asked (their outside load is dropped). */
export const ACTIVE_MS = 30_000;
const UNSUPPORTED_RETRY_MS = 5 * 60_000;
const SLOTS_TIMEOUT_MS = 2000;
/** A /slots answer larger than this is not read (a replica with hundreds of slots stays well under). */
const MAX_SLOTS_BYTES = 1 << 20;

/** The JSON of a body of at most `max` bytes; null (the rest discarded) when it is larger or not JSON. */
async function jsonUpTo(body: AsyncIterable<Buffer> & { destroy(): unknown }, max: number): Promise<unknown> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > max) {
      body.destroy();
      return null;
    }
    parts.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(parts, size).toString('utf8')) as unknown;
  } catch {
    return null;
  }
}

interface Reading {
  /** The previous outside-load reading. */
  last: number;
  unsupportedUntil: number;
  pending: boolean;
}


export class SlotWatcher {
  private timer: NodeJS.Timeout | null = null;
  private readonly readings = new WeakMap<Upstream, Reading>();

  constructor(
    private readonly upstreams: Upstreams,
    /** The headers for a replica (the engine key). */
    private readonly headers: () => Record<string, string>,
    /** Called when some replica's outside load went down (queued requests may go now). */
    private readonly onLower: () => void,
    private readonly intervalMs = SLOTS_REFRESH_MS,
  ) {}

  start(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => void this.refresh(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** One round over the replicas in use; resolves when every answer is in. */
  async refresh(): Promise<void> {
    const now = performance.now();
    const asks: Promise<void>[] = [];
    for (const u of this.upstreams.all()) {
      let r = this.readings.get(u);
      if (!r) {
        r = { last: 0, unsupportedUntil: 0, pending: false };
        this.readings.set(u, r);
      }
      if (now - u.lastUsed > ACTIVE_MS || r.unsupportedUntil > now) {
        u.external = 0;
        r.last = 0;
        continue;
      }
      if (r.pending) continue;
      asks.push(this.ask(u, r));
    }
    await Promise.all(asks);
  }

  private async ask(u: Upstream, r: Reading): Promise<void> {
    r.pending = true;
    let outside = 0;
    try {
      const res = await u.pool.request({ path: `${u.prefix}/slots`, method: 'GET', headers: this.headers(), headersTimeout: SLOTS_TIMEOUT_MS, bodyTimeout: SLOTS_TIMEOUT_MS });
      if (res.statusCode === 404 || res.statusCode === 501) {
        await res.body.dump();
        r.unsupportedUntil = performance.now() + UNSUPPORTED_RETRY_MS;
      } else if (res.statusCode === 200) {
        const slots = readSlots(await jsonUpTo(res.body, MAX_SLOTS_BYTES));
        if (slots !== null) {
          u.reportedSlots = slots.total;
          outside = Math.max(0, slots.busy - u.inFlight);
        }
      } else {
        await res.body.dump();
      }
    } catch {
      // unreachable or slow: the request path finds out on its own; no outside load assumed
    } finally {
      r.pending = false;
    }
    const before = u.external;
    u.external = Math.min(outside, r.last);
    r.last = outside;
    if (u.external < before) this.onLower();
  }
}
