/**
 * The git push webhook. Authenticated by the git server's signature over the raw body, not by
 * the admin token:
 *   GitHub           X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
 *   Gitea / Forgejo  X-Gitea-Signature / X-Forgejo-Signature (/ Gogs X-Gogs-Signature): <hex HMAC-SHA256>
 *   GitLab           X-Gitlab-Token: <the secret itself>
 * All compared in constant time. A push to the fleet branch asks for a pass (without waiting for
 * it); a push to any other ref — notably llmgw's own status branch — is acknowledged and ignored.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { LlmgwError } from '../errors/catalogue.js';
import { constantTimeEqual } from './auth.js';

export interface WebhookConfig {
  /** The shared secret configured on the git server's webhook. */
  readonly secret: string;
  /** The fleet branch ("main" or "refs/heads/main"). */
  readonly branch: string;
}

export type WebhookSource = 'github' | 'gitea' | 'gitlab';

export type WebhookDecision =
  | { readonly action: 'pass-requested'; readonly ref: string }
  | { readonly action: 'ignored'; readonly ref: string | null; readonly reason: string }
  | { readonly action: 'pong' };

const HEX64 = /^[0-9a-f]{64}$/i;

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function hmacMatches(raw: Buffer, secret: string, hex: string): boolean {
  if (!HEX64.test(hex)) return false;
  const expected = createHmac('sha256', secret).update(raw).digest();
  return timingSafeEqual(expected, Buffer.from(hex, 'hex'));
}

const bad = (message: string): LlmgwError => new LlmgwError('WEBHOOK_SIGNATURE_INVALID', message);

/** Which git server signed the request; throws WEBHOOK_SIGNATURE_INVALID when none did, or wrongly. */
export function verifyWebhookSignature(headers: IncomingHttpHeaders, raw: Buffer, secret: string): WebhookSource {
  const github = header(headers, 'x-hub-signature-256');
  if (github !== undefined) {
    const hex = github.startsWith('sha256=') ? github.slice('sha256='.length) : '';
    if (!hmacMatches(raw, secret, hex.trim())) throw bad('The X-Hub-Signature-256 signature does not match the body and the webhook secret.');
    return 'github';
  }
  for (const h of ['x-gitea-signature', 'x-forgejo-signature', 'x-gogs-signature']) {
    const sig = header(headers, h);
    if (sig === undefined) continue;
    if (!hmacMatches(raw, secret, sig.trim())) throw bad(`The ${h} signature does not match the body and the webhook secret.`);
    return 'gitea';
  }
  const gitlab = header(headers, 'x-gitlab-token');
  if (gitlab !== undefined) {
    if (!constantTimeEqual(gitlab, secret)) throw bad('The X-Gitlab-Token does not match the webhook secret.');
    return 'gitlab';
  }
  throw bad('The webhook request carries no signature (X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token).');
}

/**
 * Why the headers cannot carry a valid signature (none, or one of the wrong shape), or null: checked
 * before the body is read.
 */
export function signatureHeaderProblem(headers: IncomingHttpHeaders): string | null {
  const github = header(headers, 'x-hub-signature-256');
  if (github !== undefined) return /^sha256=[0-9a-f]{64}$/i.test(github.trim()) ? null : 'The X-Hub-Signature-256 header is not sha256=<64 hex digits>.';
  for (const h of ['x-gitea-signature', 'x-forgejo-signature', 'x-gogs-signature']) {
    const sig = header(headers, h);
    if (sig !== undefined) return HEX64.test(sig.trim()) ? null : `The ${h} header is not 64 hex digits.`;
  }
  const gitlab = header(headers, 'x-gitlab-token');
  if (gitlab !== undefined) return gitlab.length > 0 && gitlab.length <= 4096 ? null : 'The X-Gitlab-Token header is empty or too long.';
  return 'The webhook request carries no signature (X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token).';
}

/** "main" → "refs/heads/main"; full refs stay as they are. */
export function fleetRef(branch: string): string {
  return branch.startsWith('refs/') ? branch : `refs/heads/${branch}`;
}

function eventOf(headers: IncomingHttpHeaders): string | null {
  for (const h of ['x-github-event', 'x-gitea-event', 'x-forgejo-event', 'x-gogs-event', 'x-gitlab-event']) {
    const v = header(headers, h);
    if (v !== undefined) return v.trim();
  }
  return null;
}

function payloadOf(headers: IncomingHttpHeaders, raw: Buffer): unknown {
  const type = (header(headers, 'content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  let text = raw.toString('utf8');
  if (type === 'application/x-www-form-urlencoded') {
    const p = new URLSearchParams(text).get('payload');
    if (p === null) throw new LlmgwError('ADMIN_BAD_REQUEST', 'The form-encoded webhook body has no `payload` field.');
    text = p;
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new LlmgwError('ADMIN_BAD_REQUEST', `The webhook body is not valid JSON: ${(e as Error).message}`);
  }
}

/** What a verified webhook delivery asks for. Pure: the route acts on the decision. */
export function decideWebhook(headers: IncomingHttpHeaders, raw: Buffer, branch: string): WebhookDecision {
  const event = eventOf(headers);
  if (event === 'ping') return { action: 'pong' };
  const ref = (() => {
    const p = payloadOf(headers, raw);
    const r = typeof p === 'object' && p !== null ? (p as { ref?: unknown }).ref : undefined;
    return typeof r === 'string' ? r : null;
  })();
  if (event !== null && event.toLowerCase() !== 'push' && event !== 'Push Hook') {
    return { action: 'ignored', ref, reason: `event "${event}" is not a push` };
  }
  const want = fleetRef(branch);
  if (ref === null) return { action: 'ignored', ref, reason: 'the payload names no ref' };
  if (ref !== want) return { action: 'ignored', ref, reason: `${ref} is not the fleet branch ${want}` };
  return { action: 'pass-requested', ref };
}
