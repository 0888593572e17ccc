/**
 * Secrets llmgw keeps in its state dir (the engine API key, a generated admin token) and secrets the
 * operator hands it in files (admin token, webhook secret). None is ever used empty or malformed:
 * - a state secret that is missing or empty (a crash between create and write used to leave an empty
 *   file) is generated anew and written atomically: temp file (0600), fsync, rename, fsync the dir;
 * - a state secret that is there but is not what llmgw writes (hand-edited, truncated) is refused with
 *   the file named: replacing it silently would change a key that running replicas or ctl users hold;
 * - an operator's secret file that is empty or not one token is refused with the file named.
 */
import { tooShort } from '../util/secret-length.js';
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** What llmgw generates: 24 random bytes, base64url (32 characters). */
export const STATE_SECRET_RE = /^[A-Za-z0-9_-]{32,256}$/;
/** An operator-supplied token: one line of visible ASCII, no spaces. */
export const OPERATOR_SECRET_RE = /^[\x21-\x7e]{1,4096}$/;

export { MIN_SECRET_LENGTH } from '../util/secret-length.js';

export class SecretFileError extends Error {
  constructor(
    readonly path: string,
    message: string,
    /** The catalogue code (SECRET_INVALID unless a more precise one applies). */
    readonly code: 'SECRET_INVALID' | 'SECRET_TOO_SHORT' = 'SECRET_INVALID',
  ) {
    super(message);
    this.name = 'SecretFileError';
  }
}

/** Write `text` to `path` so that a crash leaves either the old file or the whole new one. */
export function writeFileAtomic(path: string, text: string, mode = 0o600): void {
  const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  const fd = openSync(tmp, 'wx', mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {
      /* already gone */
    }
    throw e;
  }
  closeSync(fd);
  try {
    renameSync(tmp, path);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      /* already gone */
    }
    throw e;
  }
  const dfd = openSync(dirname(path), 'r');
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

export interface StateSecret {
  readonly value: string;
  readonly path: string;
  /** Why it was (re)generated: null when an existing file was used. */
  readonly generated: null | 'missing' | 'empty';
}

/** A secret kept in the state dir (0600): created when missing or empty, refused when malformed. */
export function stateSecret(stateDir: string, name: string): StateSecret {
  const path = join(stateDir, name);
  let text: string | null;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new SecretFileError(path, `cannot read ${path}: ${e instanceof Error ? e.message : String(e)}`);
    text = null;
  }
  const trimmed = text?.trim() ?? '';
  if (trimmed !== '') {
    if (!STATE_SECRET_RE.test(trimmed)) {
      throw new SecretFileError(path, `${path} does not hold a key llmgw wrote (expected 32+ characters of A-Z a-z 0-9 _ -, got ${trimmed.length} characters); restore it, or delete it and llmgw generates a new one`);
    }
    return { value: trimmed, path, generated: null };
  }
  const value = randomBytes(24).toString('base64url');
  writeFileAtomic(path, `${value}\n`);
  return { value, path, generated: text === null ? 'missing' : 'empty' };
}

/** An operator's secret file: one token, else an error naming the file. */
export function operatorSecretFile(path: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new SecretFileError(path, `cannot read the ${what} file ${path}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const value = text.trim();
  if (value === '') throw new SecretFileError(path, `the ${what} file ${path} is empty; put the ${what} in it (one line)`);
  if (!OPERATOR_SECRET_RE.test(value)) throw new SecretFileError(path, `the ${what} file ${path} does not hold one token (one line of visible ASCII, no spaces)`);
  return longEnough(value, what, `the file ${path}`, path);
}

/** An operator's secret from an env var: same rules, the variable named. */
export function operatorSecretEnv(name: string, raw: string, what: string): string {
  const value = raw.trim();
  if (!OPERATOR_SECRET_RE.test(value)) throw new SecretFileError(`$${name}`, `the ${what} in $${name} is not one token (one line of visible ASCII, no spaces)`);
  return longEnough(value, what, `$${name}`, `$${name}`);
}

/** `value` when it has at least MIN_SECRET_LENGTH characters, else SECRET_TOO_SHORT naming the secret and where it came from. */
export function longEnough(value: string, what: string, where: string, path: string): string {
  const short = tooShort(value, what, where);
  if (short === null) return value;
  throw new SecretFileError(path, `SECRET_TOO_SHORT: ${short}`, 'SECRET_TOO_SHORT');
}
