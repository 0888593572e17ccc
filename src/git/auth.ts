/**
 * The git token: read from an env var or a file at each use (so a rotated token is picked up),
 * handed to isomorphic-git through onAuth, and scrubbed from anything that could reach a log.
 */
import { readFileSync } from 'node:fs';
import type { AuthCallback } from 'isomorphic-git';
import { LlmgwError } from '../errors/catalogue.js';

export interface TokenSource {
  /** Name of an environment variable holding the token. */
  readonly env?: string;
  /** Path of a file holding the token (surrounding whitespace is ignored). */
  readonly file?: string;
}

/** Basic-auth user name sent with the token; GitHub, Gitea and GitLab accept any name with a token. */
export const TOKEN_USERNAME = 'llmgw';

/**
 * The token, or null when no source is configured. A configured source that yields nothing
 * is GIT_AUTH_FAILED; messages name the variable or file, never the value.
 */
export function readToken(src: TokenSource | undefined, env: NodeJS.ProcessEnv = process.env): string | null {
  if (!src || (src.env === undefined && src.file === undefined)) return null;
  if (src.env !== undefined) {
    const v = env[src.env]?.trim();
    if (v) return v;
    if (src.file === undefined) {
      throw new LlmgwError('GIT_AUTH_FAILED', `git token env var ${src.env} is not set or empty`, { env: src.env });
    }
  }
  const file = src.file as string;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new LlmgwError('GIT_AUTH_FAILED', `git token file ${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'})`, { file });
  }
  const v = text.trim();
  if (!v) throw new LlmgwError('GIT_AUTH_FAILED', `git token file ${file} is empty`, { file });
  return v;
}

/** onAuth for isomorphic-git: basic auth with the token as password (undefined when no token). */
export function tokenAuth(token: string | null): AuthCallback | undefined {
  if (token === null) return undefined;
  return () => ({ username: TOKEN_USERNAME, password: token });
}

/** Credentials embedded in a URL (https://user:secret@host/…), which must be scrubbed as well. */
export function urlSecrets(url: string | null | undefined): string[] {
  if (!url) return [];
  try {
    const u = new URL(url);
    return [...new Set([u.password, decodeURIComponent(u.password)])].filter((s) => s.length >= 3);
  } catch {
    return [];
  }
}

/** The URL without user info, for messages. */
export function displayUrl(url: string): string {
  try {
    const u = new URL(url);
    u.username = '';
    u.password = '';
    return u.toString();
  } catch {
    return url.replace(/\/\/[^/@]*@/, '//');
  }
}

/** Replace every secret (and any URL user info) in text. */
export function scrub(text: string, secrets: readonly (string | null | undefined)[]): string {
  let out = text.replace(/(\b[a-z][a-z0-9+.-]*:\/\/)[^/\s@]*@/gi, '$1');
  for (const s of secrets) {
    if (!s) continue;
    out = out.split(s).join('***');
    const b64 = Buffer.from(`${TOKEN_USERNAME}:${s}`).toString('base64');
    out = out.split(b64).join('***');
  }
  return out;
}
