/**
 * What a replica has in flight, as llama-server itself reports it (GET /slots, `is_processing`): so
 * requests proxied by any router instance — leader or standby — count. Read with the router's own
 * parser (engine-api/slots.ts readSlots).
 */
import { request } from '../util/undici-lean.js';
import { readSlots } from '../engine-api/slots.js';
import type { InFlight } from './stops.js';

const PROBE_TIMEOUT_MS = 2000;
const MAX_BYTES = 1 << 20;

/** A probe of `${endpoint}/slots` with the engine key. */
export function slotsProbe(engineApiKey: string): (endpoint: string) => Promise<InFlight> {
  return async (endpoint) => {
    if (!endpoint) return 'unknown';
    try {
      const res = await request(`${endpoint}/slots`, { headers: { authorization: `Bearer ${engineApiKey}` }, headersTimeout: PROBE_TIMEOUT_MS, bodyTimeout: PROBE_TIMEOUT_MS });
      if (res.statusCode !== 200) {
        await res.body.dump();
        return 'unknown';
      }
      const text = await res.body.text();
      if (text.length > MAX_BYTES) return 'unknown';
      const slots = readSlots(JSON.parse(text) as unknown);
      return slots === null ? 'unknown' : slots.busy;
    } catch (e) {
      const code = (e as { code?: string }).code;
      // Nothing listens: nothing is in flight there.
      return code === 'ECONNREFUSED' ? 'gone' : 'unknown';
    }
  };
}
