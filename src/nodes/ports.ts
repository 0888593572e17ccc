/**
 * Replica port allocation: pick a port in the node's range that no live replica has claimed and
 * nothing on the node listens on. The listening set comes from /proc/net/tcp{,6} (state 0A) printed
 * by the node script; `ss -ltnH` output is parsed too.
 */
import { LlmgwError } from '../errors/catalogue.js';

/** Local ports in LISTEN state from /proc/net/tcp and /proc/net/tcp6 contents (concatenated). */
export function parseProcNetTcp(text: string): Set<number> {
  const out = new Set<number>();
  for (const raw of text.split('\n')) {
    const f = raw.trim().split(/\s+/);
    // sl local_address rem_address st …
    const local = f[1];
    const st = f[3];
    if (local === undefined || st !== '0A') continue;
    const hex = local.slice(local.lastIndexOf(':') + 1);
    const port = Number.parseInt(hex, 16);
    if (Number.isInteger(port) && port > 0) out.add(port);
  }
  return out;
}

/** Local ports from `ss -ltnH` (State Recv-Q Send-Q Local:Port Peer:Port …). */
export function parseSsListening(text: string): Set<number> {
  const out = new Set<number>();
  for (const raw of text.split('\n')) {
    const f = raw.trim().split(/\s+/);
    const local = f[3];
    if (local === undefined) continue;
    const port = Number(local.slice(local.lastIndexOf(':') + 1));
    if (Number.isInteger(port) && port > 0) out.add(port);
  }
  return out;
}

/**
 * The lowest port in [from, to] not in `used` (and not in `avoid`). Throws NODE_NO_FREE_PORT when
 * the range is exhausted.
 */
export function pickPort(node: string, range: { readonly from: number; readonly to: number }, used: ReadonlySet<number>, avoid: ReadonlySet<number> = new Set()): number {
  for (let p = range.from; p <= range.to; p++) {
    if (!used.has(p) && !avoid.has(p)) return p;
  }
  throw new LlmgwError('NODE_NO_FREE_PORT', `no free port on node ${node} in ${range.from}-${range.to} (${countIn(range, used, avoid)} in use)`, {
    node,
    from: range.from,
    to: range.to,
  });
}

/**
 * A replica's first port, picked without asking the node (#38): the lowest in the range that no
 * replica the driver knows holds; null when they hold every one (then the node is asked). The start
 * script refuses a port that is taken (EXIT_PORT_TAKEN), and the next pick asks the node.
 */
export function firstPick(node: string, range: { readonly from: number; readonly to: number }, known: readonly number[]): number | null {
  try {
    return pickPort(node, range, new Set(known));
  } catch {
    return null;
  }
}

function countIn(range: { from: number; to: number }, a: ReadonlySet<number>, b: ReadonlySet<number>): number {
  let n = 0;
  for (let p = range.from; p <= range.to; p++) if (a.has(p) || b.has(p)) n++;
  return n;
}
