/** What the admin port holds and waits for: the limits of its doors, waits and bodies (defaults here). */
import { DEFAULT_CLIENT_TIMEOUTS } from '../util/client-timeouts.js';

export interface AdminLimits {
  /** Longest a `?wait=true` restart request may hold the connection. */
  readonly maxWaitMs: number;
  /** Wait when `?wait=true` gives no timeout. */
  readonly defaultWaitMs: number;
  /** How often a waiting restart request checks restartDone. */
  readonly pollMs: number;
  /** Largest webhook body (GitHub caps deliveries at 25 MB). */
  readonly webhookBodyBytes: number;
  /** Most log lines one request may ask for. */
  readonly maxLogLines: number;
  /** A client's request line and headers must arrive within this (408 and closed after). */
  readonly headersTimeoutMs: number;
  /** A client's whole request, body included, must arrive within this (408 and closed after). */
  readonly requestTimeoutMs: number;
  /** Most token-authenticated requests in progress on the admin port at once (503 ADMIN_OVERLOADED above; doors.ts). */
  readonly maxInFlight: number;
  /** Most requests without a token (/metrics, the page's files, webhooks) in progress at once (503 above). */
  readonly maxPublicInFlight: number;
  /** Most event streams (the status page's) open at once (503 above). */
  readonly maxStreams: number;
  /** A response of which the client has taken nothing for this long is cut (a client that stopped reading). */
  readonly sendTimeoutMs: number;
  /** Most webhook bodies read at once before their signature is checked (503 above). */
  readonly webhookUnverified: number;
  /** Of those, most from one client address. */
  readonly webhookUnverifiedPerAddress: number;
  /** A webhook body must be in within this, or its connection is closed. */
  readonly webhookBodyMs: number;
  /** A webhook delivery (its id, or its signed body) seen within this asks for no pass again. */
  readonly webhookReplayMs: number;
  /** Passes asked for by webhooks: at most one per this. */
  readonly webhookPassEveryMs: number;
}

export const DEFAULT_ADMIN_LIMITS: AdminLimits = Object.freeze({
  maxWaitMs: 600_000,
  defaultWaitMs: 30_000,
  pollMs: 200,
  // read before the signature is checked, so kept small: a push event's JSON is a few KiB per
  // commit; a bigger delivery is refused (413) and the poll picks the push up
  webhookBodyBytes: 64 * 1024,
  maxLogLines: 10_000,
  headersTimeoutMs: DEFAULT_CLIENT_TIMEOUTS.headersMs,
  requestTimeoutMs: DEFAULT_CLIENT_TIMEOUTS.requestMs,
  maxInFlight: 256,
  maxPublicInFlight: 64,
  maxStreams: 64,
  sendTimeoutMs: 15_000,
  webhookUnverified: 8,
  webhookUnverifiedPerAddress: 2,
  webhookBodyMs: 5_000,
  webhookReplayMs: 3_600_000,
  webhookPassEveryMs: 1_000,
});
