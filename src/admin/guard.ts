/**
 * What an unauthenticated client can make the admin port hold:
 * - at most `maxInFlight` requests at once (503 ADMIN_OVERLOADED, Retry-After, closed, above it);
 * - a webhook body is read before its signature can be checked, so it gets a small budget: a
 *   declared length above `webhookBodyBytes` is refused from its headers (413), at most
 *   `webhookUnverified` bodies are read at once (503 above), and a body not in within
 *   `webhookBodyMs` has its connection closed. A forged but well-formed signature so buys at most
 *   webhookUnverified × webhookBodyBytes of memory for webhookBodyMs. (A GitLab token is checked
 *   whole before the body: it is the secret itself.)
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { LlmgwError } from '../errors/catalogue.js';

/** A counter with a ceiling: `enter` is false (and counts nothing) at the ceiling. */
export class Gate {
  private n = 0;
  constructor(readonly max: number) {}
  get count(): number {
    return this.n;
  }
  enter(): boolean {
    if (this.n >= this.max) return false;
    this.n++;
    return true;
  }
  leave(): void {
    if (this.n > 0) this.n--;
  }
}

type Done = (err?: Error) => void;

/** onRequest hook: admits the request through `gate` until its response closes, else ADMIN_OVERLOADED (closed). */
export function gateHook(gate: Gate, what: string, code: 'ADMIN_OVERLOADED' = 'ADMIN_OVERLOADED'): (req: FastifyRequest, reply: FastifyReply, done: Done) => void {
  return (_req, reply, done) => {
    if (!gate.enter()) {
      void reply.header('retry-after', '1').header('connection', 'close');
      done(new LlmgwError(code, `${gate.max} ${what} in progress on the admin port, the limit; retry shortly`));
      return;
    }
    reply.raw.once('close', () => gate.leave());
    done();
  };
}

/** The declared length is over the budget: refused from the headers, before a byte of body is read. */
export function declaredTooLarge(req: FastifyRequest, budget: number): boolean {
  const len = Number(req.headers['content-length'] ?? 0);
  return Number.isFinite(len) && len > budget;
}

/** Closes the connection when the body has not been read within `ms` (the handler clears it). */
export function bodyDeadline(req: FastifyRequest, reply: FastifyReply, ms: number, onExpire: () => void): void {
  const timer = setTimeout(() => {
    if (reply.sent) return;
    onExpire();
    req.raw.socket?.destroy();
  }, ms);
  timer.unref();
  reply.raw.once('close', () => clearTimeout(timer));
  req.raw.once('end', () => clearTimeout(timer));
}
