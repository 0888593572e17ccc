/**
 * POST /admin/v1/webhook: the git push webhook, authenticated by its signature (webhook.ts), with
 * what an unauthenticated or replaying client can make it do bounded:
 * - refused before the body is read: no webhook configured, no plausible signature header, a
 *   declared length over the budget, a wrong GitLab token;
 * - at most `webhookUnverified` bodies read at once before their signature is checked, at most
 *   `webhookUnverifiedPerAddress` of them from one client address (so one client cannot hold them
 *   all), each for at most `webhookBodyMs`;
 * - a delivery seen in the last hour (its X-GitHub-Delivery / X-Gitea-Delivery /
 *   X-Gitlab-Event-UUID, or the same HMAC-signed body) asks for no pass again (#36, N11);
 * - passes asked for by webhooks are coalesced to at most one a second (PassCoalescer).
 */
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import { nodeTimers, type LoopTimers } from '../../reconciler/loop.js';
import { LlmgwError } from '../../errors/catalogue.js';
import { constantTimeEqual } from '../auth.js';
import type { AdminBackend } from '../backend.js';
import { bodyDeadline, declaredTooLarge, Gate, gateHook } from '../guard.js';
import { decideWebhook, signatureHeaderProblem, verifyWebhookSignature, type WebhookConfig, type WebhookSource } from '../webhook.js';

export interface WebhookLimits {
  readonly webhookBodyBytes: number;
  readonly webhookUnverified: number;
  readonly webhookUnverifiedPerAddress: number;
  readonly webhookBodyMs: number;
  /** How long a delivery id (and a signed body's digest) is remembered. */
  readonly webhookReplayMs: number;
  /** Least time between two passes asked for by webhooks. */
  readonly webhookPassEveryMs: number;
}

const DELIVERY_HEADERS = ['x-github-delivery', 'x-gitea-delivery', 'x-forgejo-delivery', 'x-gogs-delivery', 'x-gitlab-event-uuid'] as const;
/** Most deliveries remembered (the oldest are forgotten first). */
const MAX_REMEMBERED = 10_000;

/** The delivery id a git server gives the request, or null. */
export function deliveryId(headers: IncomingHttpHeaders): string | null {
  for (const h of DELIVERY_HEADERS) {
    const v = headers[h];
    const s = Array.isArray(v) ? v[0] : v;
    if (typeof s === 'string' && s.trim() !== '') return `${h}:${s.trim().slice(0, 200)}`;
  }
  return null;
}

/** Keys (delivery ids, body digests) seen within `ttlMs`; bounded, oldest forgotten first. */
export class SeenDeliveries {
  private readonly seen = new Map<string, number>();
  constructor(
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}
  /** True when any of `keys` was seen within the ttl; all of them are remembered from now. */
  check(keys: readonly string[]): boolean {
    const t = this.now();
    for (const [k, at] of this.seen) {
      if (t - at < this.ttlMs && this.seen.size <= MAX_REMEMBERED) break;
      this.seen.delete(k);
    }
    const again = keys.some((k) => {
      const at = this.seen.get(k);
      return at !== undefined && t - at < this.ttlMs;
    });
    for (const k of keys) {
      this.seen.delete(k);
      this.seen.set(k, t);
    }
    return again;
  }
}

/** Runs `run` at most once every `everyMs`: a call within that time is folded into one later run. */
export class PassCoalescer {
  private last = Number.NEGATIVE_INFINITY;
  private timer: unknown = null;
  constructor(
    private readonly everyMs: number,
    private readonly run: () => void,
    private readonly now: () => number = () => performance.now(),
    /** The loop's timers (fake ones in tests; node's, unref'd, by default). */
    private readonly timers: Pick<LoopTimers, 'setTimeout' | 'clearTimeout'> = nodeTimers,
  ) {}
  /** 'now' when it ran at once, 'folded' when a later run covers it. */
  request(): 'now' | 'folded' {
    const t = this.now();
    if (this.timer !== null) return 'folded';
    if (t - this.last >= this.everyMs) {
      this.last = t;
      this.run();
      return 'now';
    }
    this.timer = this.timers.setTimeout(() => {
      this.timer = null;
      this.last = this.now();
      this.run();
    }, this.everyMs - (t - this.last));
    return 'folded';
  }
  stop(): void {
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    this.timer = null;
  }
}

/** Per client address: at most `max` at once (the whole gate's budget is its own). */
class PerAddress {
  private readonly held = new Map<string, number>();
  constructor(private readonly max: number) {}
  enter(addr: string): boolean {
    const n = this.held.get(addr) ?? 0;
    if (n >= this.max) return false;
    this.held.set(addr, n + 1);
    return true;
  }
  leave(addr: string): void {
    const n = (this.held.get(addr) ?? 1) - 1;
    if (n <= 0) this.held.delete(addr);
    else this.held.set(addr, n);
  }
}

export function registerWebhook(app: FastifyInstance, o: { prefix: string; webhook: WebhookConfig | undefined; backend: AdminBackend; limits: WebhookLimits; log: FastifyBaseLogger | undefined }): void {
  const { limits, log, backend } = o;
  const noStore = (reply: FastifyReply): FastifyReply => reply.header('cache-control', 'no-store');
  const seen = new SeenDeliveries(limits.webhookReplayMs);
  const passes = new PassCoalescer(limits.webhookPassEveryMs, () => {
    void backend.requestPass('webhook').catch((e: unknown) => log?.error({ err: e }, 'admin: pass after webhook failed'));
  });
  app.addHook('onClose', async () => passes.stop());

  void app.register(
    async (hook) => {
      // keep the raw bytes: the signature is over them
      hook.removeAllContentTypeParsers();
      hook.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: limits.webhookBodyBytes }, (_req, body, done) => done(null, body));

      // refused before the body is read: no webhook configured, or no plausible signature header
      // (an unauthenticated client cannot make the controller buffer a body)
      hook.addHook('onRequest', (req, reply, done) => {
        const why = !o.webhook ? null : signatureHeaderProblem(req.headers);
        if (!o.webhook || why) void reply.header('connection', 'close');
        if (!o.webhook) done(new LlmgwError('WEBHOOK_NOT_CONFIGURED', 'This controller accepts no push webhooks (no webhook secret configured).'));
        else if (why) {
          log?.warn({ code: 'WEBHOOK_SIGNATURE_INVALID', ip: req.ip }, 'admin: webhook refused');
          done(new LlmgwError('WEBHOOK_SIGNATURE_INVALID', why));
        } else done();
      });
      // the budget of what an unverified body may hold (guard.ts), and one address's share of it
      const unverified = new Gate(limits.webhookUnverified);
      const admitBody = gateHook(unverified, 'webhook bodies read before their signature is checked');
      const perAddress = new PerAddress(limits.webhookUnverifiedPerAddress);
      hook.addHook('onRequest', (req, reply, done) => {
        if (reply.sent) return done();
        if (declaredTooLarge(req, limits.webhookBodyBytes)) {
          void reply.header('connection', 'close');
          return done(new LlmgwError('ADMIN_BODY_TOO_LARGE', `The webhook delivery declares more than ${limits.webhookBodyBytes} bytes; the poll picks the push up.`));
        }
        const gitlab = req.headers['x-gitlab-token'];
        if (typeof gitlab === 'string' && o.webhook && !constantTimeEqual(gitlab, o.webhook.secret)) {
          void reply.header('connection', 'close');
          log?.warn({ code: 'WEBHOOK_SIGNATURE_INVALID', ip: req.ip }, 'admin: webhook refused');
          return done(new LlmgwError('WEBHOOK_SIGNATURE_INVALID', 'The X-Gitlab-Token does not match the webhook secret.'));
        }
        const addr = req.socket.remoteAddress ?? '';
        if (!perAddress.enter(addr)) {
          void reply.header('retry-after', '1').header('connection', 'close');
          log?.warn({ code: 'ADMIN_OVERLOADED', ip: req.ip }, 'admin: webhook refused, this address already sends as many unverified bodies as one may');
          return done(new LlmgwError('ADMIN_OVERLOADED', `${limits.webhookUnverifiedPerAddress} webhook bodies from this address are being read before their signature is checked, the limit for one address; retry shortly`));
        }
        reply.raw.once('close', () => perAddress.leave(addr));
        bodyDeadline(req, reply, limits.webhookBodyMs, () => log?.warn({ code: 'REQUEST_TIMEOUT', ip: req.ip }, 'admin: webhook body not in time; closed'));
        admitBody(req, reply, done);
      });

      hook.post('/webhook', { bodyLimit: limits.webhookBodyBytes }, async (req, reply) => {
        const cfg = o.webhook;
        if (!cfg) throw new LlmgwError('WEBHOOK_NOT_CONFIGURED', 'This controller accepts no push webhooks (no webhook secret configured).');
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        let source: WebhookSource;
        try {
          source = verifyWebhookSignature(req.headers, raw, cfg.secret);
        } catch (e) {
          log?.warn({ code: (e as LlmgwError).code, ip: req.ip }, 'admin: webhook refused');
          throw e;
        }
        const decision = decideWebhook(req.headers, raw, cfg.branch);
        if (decision.action === 'pong') return noStore(reply).code(200).send({ accepted: true, action: 'pong' });
        // a replay: the same delivery id, or the same HMAC-signed body (the id is not signed; a
        // GitLab token is the secret itself, so its body proves nothing and only the id counts)
        const id = deliveryId(req.headers);
        const keys = [...(id === null ? [] : [id]), ...(source === 'gitlab' ? [] : [`body:${createHash('sha256').update(raw).digest('hex')}`])];
        if (keys.length > 0 && seen.check(keys)) {
          log?.info({ source, delivery: id, ip: req.ip }, 'admin: webhook delivery seen before; ignored');
          return noStore(reply).code(202).send({ accepted: true, action: 'ignored', ref: decision.ref, reason: 'this delivery was received before (within the last hour)' });
        }
        if (decision.action === 'pass-requested') {
          const how = passes.request();
          log?.info({ source, ref: decision.ref, delivery: id, coalesced: how === 'folded' }, 'admin: push webhook; pass requested');
        } else {
          log?.debug({ source, ref: decision.ref, reason: decision.reason }, 'admin: webhook ignored');
        }
        return noStore(reply).code(202).send({ accepted: true, ...decision });
      });
    },
    { prefix: o.prefix },
  );
}
