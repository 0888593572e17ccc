/**
 * Client authentication against access/keys.yaml: the client sends `Authorization: Bearer KEY` (or
 * `x-api-key: KEY`); the router looks up sha256(KEY) among the spec's key hashes. Lookups go through
 * a Map of hashes built once per spec object (a WeakMap keyed by the frozen spec), so a new
 * revision takes effect on the next request and the hot path does one hash and one Map lookup.
 * Comparing hashes of the secret (not the secret) needs no constant-time compare.
 *
 * `ConnectionKeys` remembers the grant of each client connection's last verified key, so a keep-alive
 * client does not pay the sha256 on every request.
 */
import * as crypto from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { FleetSpec, KeyLimits } from '../fleet-spec/types.js';
import { RouterError } from './errors.js';
import { tighter } from './limits.js';

/** What a key may do. */
export interface KeyGrant {
  /** The key's name in access/keys.yaml (never the key). */
  readonly name: string;
  /** True when the key may use every model ('*'). */
  readonly all: boolean;
  /** Canonical model names the key may use (empty when `all`). */
  readonly models: ReadonlySet<string>;
  /** True when the key has any limit (its own, per model, or a model's cap): the limiter is asked. */
  readonly limited: boolean;
  /** The key's limits over all its models. */
  readonly limits: KeyLimits | null;
  /** Per canonical model: the key's model_limits and the model's cap (access/keys.yaml `models:`), the tighter of each. */
  readonly modelLimits: ReadonlyMap<string, KeyLimits>;
  /** `trusted: true`: its answers keep llama-server's prompt-cache figures (else redact.ts takes them out). */
  readonly trusted: boolean;
  /** `isolate_cache: true`: its affinity keys are namespaced by the key (affinity.ts `isolatedKey`). */
  readonly isolateCache: boolean;
}

/**
 * The grant when auth is explicitly turned off (local single-user setups): trusted, as there are no
 * keys to tell apart and every client already shares one identity.
 */
export const OPEN_GRANT: KeyGrant = Object.freeze({ name: '(auth disabled)', all: true, models: new Set<string>(), limited: false, limits: null, modelLimits: new Map<string, KeyLimits>(), trusted: true, isolateCache: false });

export function grantAllows(grant: KeyGrant, canonicalModel: string): boolean {
  return grant.all || grant.models.has(canonicalModel);
}

/** Per-spec lookup tables, built once per spec object. */
export interface CompiledSpec {
  /** name or alias → canonical model name (a Map: no prototype keys such as "constructor"). */
  readonly names: ReadonlyMap<string, string>;
  /** sha256 hex of a key → its grant. */
  readonly keys: ReadonlyMap<string, KeyGrant>;
}

const compiled = new WeakMap<FleetSpec, CompiledSpec>();

export function compileSpec(spec: FleetSpec): CompiledSpec {
  let c = compiled.get(spec);
  if (c) return c;
  const names = new Map<string, string>();
  for (const [name, canonical] of Object.entries(spec.modelNames)) names.set(name, canonical);
  for (const name of Object.keys(spec.models)) if (!names.has(name)) names.set(name, name);
  const keys = new Map<string, KeyGrant>();
  for (const k of spec.access.keys) {
    const all = k.models.includes('*');
    const models = new Set<string>();
    if (!all) for (const m of k.models) models.add(names.get(m) ?? m);
    const modelLimits = new Map<string, KeyLimits>();
    for (const [m, l] of Object.entries(spec.access.modelLimits ?? {})) modelLimits.set(m, l);
    for (const [m, l] of Object.entries(k.modelLimits ?? {})) modelLimits.set(m, tighter(l, modelLimits.get(m))!);
    const limits = k.limits ?? null;
    keys.set(k.sha256.toLowerCase(), Object.freeze({ name: k.name, all, models, limited: limits !== null || modelLimits.size > 0, limits, modelLimits, trusted: k.trusted, isolateCache: k.isolateCache }));
  }
  c = Object.freeze({ names, keys });
  compiled.set(spec, c);
  return c;
}

/** The key the client sent: `Authorization: Bearer KEY` first, then `x-api-key`. Null when none. */
export function extractKey(headers: IncomingHttpHeaders): string | null {
  const auth = headers.authorization;
  if (auth !== undefined && auth.length > 7 && auth.slice(0, 7).toLowerCase() === 'bearer ') {
    const k = auth.slice(7).trim();
    if (k.length > 0) return k;
  }
  const x = headers['x-api-key'];
  if (typeof x === 'string') {
    const k = x.trim();
    if (k.length > 0) return k;
  }
  return null;
}

/** One-shot crypto.hash (Node ≥ 20.12) is ~4× cheaper than a Hash object for short inputs. */
const oneShot = (crypto as { hash?: (alg: string, data: string, enc: 'hex') => string }).hash;

export function sha256Hex(s: string): string {
  return oneShot ? oneShot('sha256', s, 'hex') : crypto.createHash('sha256').update(s, 'utf8').digest('hex');
}

/**
 * The grant for a request's key. Throws AUTH_MISSING / AUTH_INVALID (401). With `required: false`
 * every request gets OPEN_GRANT (keys are not even read).
 */
export function authenticate(compiledSpec: CompiledSpec | null, headers: IncomingHttpHeaders, required: boolean): KeyGrant {
  if (!required) return OPEN_GRANT;
  const key = extractKey(headers);
  if (key === null) {
    throw new RouterError('AUTH_MISSING', 'No API key provided. Send it as "Authorization: Bearer KEY" (or "x-api-key: KEY").');
  }
  const grant = compiledSpec?.keys.get(sha256Hex(key));
  if (!grant) throw new RouterError('AUTH_INVALID', 'Incorrect API key provided.');
  return grant;
}

interface ConnectionGrant {
  compiled: CompiledSpec;
  authorization: string | undefined;
  xApiKey: string | string[] | undefined;
  grant: KeyGrant;
}

/**
 * The grant of each client connection's last verified key. A keep-alive client sends the same
 * `Authorization` (or `x-api-key`) header on every request; when a request on a connection carries
 * exactly the header values of the last one verified there, under the same spec tables, it gets the
 * same grant without hashing the key again. Anything else (another key, a new revision of
 * access/keys.yaml) is checked by `authenticate` as usual, and a refused key is never remembered.
 *
 * Entries are held in a WeakMap keyed by the connection's socket, so a key stays in memory no longer
 * than the client's own connection (which holds the same header strings anyway), and a connection
 * only ever sees the grant of a key sent on it.
 */
export class ConnectionKeys {
  private readonly byConnection = new WeakMap<object, ConnectionGrant>();

  grant(compiledSpec: CompiledSpec, headers: IncomingHttpHeaders, required: boolean, connection: object): KeyGrant {
    if (!required) return OPEN_GRANT;
    const authorization = headers.authorization;
    const xApiKey = headers['x-api-key'];
    const last = this.byConnection.get(connection);
    if (last !== undefined && last.compiled === compiledSpec && last.authorization === authorization && last.xApiKey === xApiKey) return last.grant;
    const grant = authenticate(compiledSpec, headers, true);
    if (last === undefined) {
      this.byConnection.set(connection, { compiled: compiledSpec, authorization, xApiKey, grant });
    } else {
      last.compiled = compiledSpec;
      last.authorization = authorization;
      last.xApiKey = xApiKey;
      last.grant = grant;
    }
    return grant;
  }
}
