/**
 * The upstream response headers passed to the client: a small allowlist (nothing that could echo the
 * engine API key, no server, CORS or auth headers), picked out of undici's raw header Buffers without
 * making a string per header.
 */

/** Upstream response headers passed to the client; everything else (server, CORS, auth echoes…) is dropped. */
const FORWARD_HEADERS = ['content-type', 'content-length', 'content-encoding', 'cache-control', 'retry-after'] as const;

/**
 * The allowlisted names by length (their lengths differ: 11, 12, 13, 14, 16), so each upstream header
 * is compared with at most one name, and most (date, server, connection…) with none.
 */
const FORWARD_BY_LENGTH: ({ name: string; bytes: Buffer } | undefined)[] = [];
for (const name of FORWARD_HEADERS) {
  if (FORWARD_BY_LENGTH[name.length]) throw new Error(`two forwarded header names of length ${name.length}`);
  FORWARD_BY_LENGTH[name.length] = { name, bytes: Buffer.from(name, 'latin1') };
}

/** True when a raw header name equals `lower` (lowercase ASCII, same length), ignoring case; no string is made. */
function nameIs(n: Buffer, lower: Buffer): boolean {
  for (let i = 0; i < n.length; i++) {
    const c = n[i]!;
    if ((c >= 65 && c <= 90 ? c + 32 : c) !== lower[i]) return false;
  }
  return true;
}

/** The upstream response headers passed on, picked out of undici's raw [name, value, …] Buffers. */
export function forwardedHeaders(raw: readonly Buffer[], out: Record<string, string>): void {
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const n = raw[i]!;
    const f = FORWARD_BY_LENGTH[n.length];
    if (f !== undefined && out[f.name] === undefined && nameIs(n, f.bytes)) out[f.name] = raw[i + 1]!.toString('latin1');
  }
}
