/**
 * Which door of the admin port a request comes through, and what each door may hold (#36, N1).
 * Without the token nobody can lock the port:
 * - `open`: GET /healthz and /readyz, for load balancers: no token, no gate, nothing read.
 * - `public`: the routes that need no token (/metrics, the status page's assets, the webhook, which
 *   its signature authenticates): their own gate (`maxPublicInFlight`), so they cannot take the
 *   token routes' slots.
 * - `token`: every other route, an unknown one (404) included: the token is checked from the
 *   headers, before a byte of body is read and before a slot is taken; then the token gate.
 * - `stream`: the status page's event streams (token too): a cap of their own (`maxStreams`), as a
 *   stream holds its slot for as long as a page is open.
 * A response the client does not read is cut once nothing of it has been taken for
 * `sendTimeoutMs` (SendWatch); a stream drops such a client by itself (events/sse.ts).
 * With authentication off, every door first refuses a foreign Host or Origin (util/local-only.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/catalogue.js';
import { foreignRequest, type LocalOnly } from '../util/local-only.js';
import type { AdminAuth } from './auth.js';
import { Gate, gateHook } from './guard.js';

export type Door = 'open' | 'public' | 'token' | 'stream';

export const OPEN_PATHS: readonly string[] = ['/healthz', '/readyz'];

/** The door of a request: `route` is the matched route's pattern (undefined: no route, a 404). */
export function doorOf(route: string | undefined, prefix: string): Door {
  if (route === undefined) return 'token';
  if (OPEN_PATHS.includes(route)) return 'open';
  if (route === `${prefix}/events/stream` || route === `${prefix}/view/stream`) return 'stream';
  if (route === '/metrics' || route === `${prefix}/webhook` || route === '/' || route === '/ui' || route.startsWith('/ui/') || route === '/favicon.ico') return 'public';
  return 'token';
}

export interface DoorLimits {
  /** Token routes in progress at once. */
  readonly maxInFlight: number;
  /** Requests on the routes without a token in progress at once. */
  readonly maxPublicInFlight: number;
  /** Event streams open at once. */
  readonly maxStreams: number;
}

type Done = (err?: Error) => void;

/**
 * Cuts a response nothing of which the client has taken for `timeoutMs` while some of it waits
 * (a client that stopped reading: its slot would be held until it closes). Looked at every second.
 */
export class SendWatch {
  private readonly watched = new Map<ServerResponse, { since: number | null; left: number }>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly timeoutMs: number,
    private readonly onCut: (res: ServerResponse) => void,
    private readonly now: () => number = () => performance.now(),
  ) {}

  watch(res: ServerResponse): void {
    this.watched.set(res, { since: null, left: 0 });
    res.once('close', () => this.watched.delete(res));
    if (this.timer === null) {
      this.timer = setInterval(() => this.look(), Math.min(1000, Math.max(50, Math.floor(this.timeoutMs / 4))));
      this.timer.unref();
    }
  }

  /** One look at every watched response (the timer's; tests call it). */
  look(): void {
    const now = this.now();
    for (const [res, w] of this.watched) {
      const left = res.writableLength;
      if (left === 0 && !res.writableNeedDrain) w.since = null;
      else if (w.since === null || left < w.left) w.since = now;
      w.left = left;
      if (w.since !== null && now - w.since >= this.timeoutMs) {
        this.watched.delete(res);
        this.onCut(res);
        res.destroy();
      }
    }
    if (this.watched.size === 0 && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.watched.clear();
  }
}

/** The root onRequest hook: Host/Origin (auth off), the token (before the body), the door's gate, the send watch. */
export function doorsHook(o: { auth: AdminAuth; prefix: string; limits: DoorLimits; localOnly: LocalOnly | null; sendWatch: SendWatch }): (req: FastifyRequest, reply: FastifyReply, done: Done) => void {
  const token = gateHook(new Gate(o.limits.maxInFlight), 'requests');
  const open = gateHook(new Gate(o.limits.maxPublicInFlight), 'requests without a token (metrics, the page\'s files, webhooks)');
  const streams = gateHook(new Gate(o.limits.maxStreams), 'event streams');
  return (req, reply, done) => {
    if (o.localOnly) {
      const foreign = foreignRequest(req.headers, o.localOnly);
      if (foreign) {
        void reply.header('connection', 'close');
        return done(new LlmgwError(foreign.code, foreign.message));
      }
    }
    const door = doorOf(req.routeOptions.url, o.prefix);
    if (door === 'open') return done();
    if (door !== 'public') {
      try {
        o.auth.check(req.headers);
      } catch (e) {
        // the body (if any) is never read: the connection goes with the answer
        void reply.header('connection', 'close');
        return done(e as Error);
      }
    }
    if (door !== 'stream') o.sendWatch.watch(reply.raw);
    (door === 'public' ? open : door === 'stream' ? streams : token)(req, reply, done);
  };
}
