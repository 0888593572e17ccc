/**
 * Admin authentication: `Authorization: Bearer TOKEN`, compared in constant time over sha256
 * digests (so neither the length nor a prefix of the token leaks through timing).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { LlmgwError } from '../errors/catalogue.js';

export const sha256 = (s: string | Buffer): Buffer => createHash('sha256').update(s).digest();

/** Constant-time string equality (over sha256 digests: equal length whatever the inputs). */
export function constantTimeEqual(a: string | Buffer, b: string | Buffer): boolean {
  return timingSafeEqual(sha256(a), sha256(b));
}

const BEARER = /^Bearer[ \t]+(\S+)[ \t]*$/i;

/** The token a request presents, or null. */
export function bearerToken(headers: IncomingHttpHeaders): string | null {
  const h = headers.authorization;
  if (typeof h !== 'string') return null;
  return BEARER.exec(h)?.[1] ?? null;
}

export interface AdminAuth {
  /** Throws ADMIN_AUTH_MISSING / ADMIN_AUTH_INVALID; returns when the request may proceed. */
  check(headers: IncomingHttpHeaders): void;
  readonly enabled: boolean;
}

/** `token: null` turns authentication off (explicit local mode); an empty token is refused. */
export function adminAuth(token: string | null): AdminAuth {
  if (token === null) return { enabled: false, check: () => undefined };
  if (token.trim() === '') throw new Error('the admin token is empty; set a token or disable admin auth explicitly');
  const expected = sha256(token);
  return {
    enabled: true,
    check(headers) {
      const given = bearerToken(headers);
      if (given === null) {
        throw new LlmgwError('ADMIN_AUTH_MISSING', headers.authorization === undefined ? 'The request carries no admin token.' : 'The Authorization header is not `Bearer TOKEN`.');
      }
      if (!timingSafeEqual(sha256(given), expected)) throw new LlmgwError('ADMIN_AUTH_INVALID', 'The admin token is not valid.');
    },
  };
}
