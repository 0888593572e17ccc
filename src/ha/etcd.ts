/**
 * The etcd connection (I/O at the edge): settings, opening the etcd3 client with bounded calls, and
 * the boundary where etcd3/gRPC errors become catalogue reasons (like src/git/errors.ts).
 *
 * Every unary call gets a deadline (a partition that swallows packets must not hang a pass), the
 * channel pings etcd so a stalled connection is noticed and re-dialled, and etcd3's fault handling
 * (cockatiel, as its docs show) is tuned so a restored etcd is used again within about a second:
 * the default circuit breaker stays open 5 s and the default watch backoff grows to 30 s.
 *
 * Shell: the deadlines are counted from the wall clock it is given (`now`, Date.now at the
 * composition root); this file reads no clock and sets no timer of its own.
 */
import { readFileSync } from 'node:fs';
import { ConsecutiveBreaker, ExponentialBackoff, circuitBreaker, handleWhen, isBrokenCircuitError, retry, type IBackoff } from 'cockatiel';
import {
  Etcd3,
  EtcdAuthenticationFailedError,
  EtcdInvalidAuthTokenError,
  EtcdLeaseInvalidError,
  EtcdPermissionDeniedError,
  EtcdRoleNotGrantedError,
  EtcdUserNotFoundError,
  EtcdWatchStreamEnded,
  GRPCCancelledError,
  GRPCDeadlineExceededError,
  GRPCUnauthenticatedError,
  GRPCUnavailableError,
  isRecoverableError,
  type IOptions,
} from 'etcd3';
import { LlmgwError, type ReasonRef } from '../errors/catalogue.js';
import { dropIpServername } from './tls-ip-servername.js';

export interface EtcdSettings {
  /** Client URLs, http://host:port or https://host:port. */
  readonly hosts: readonly string[];
  /** Key prefix of this fleet, e.g. '/llmgw/' + fleet name; keys are prefix + '/leader' etc. */
  readonly prefix: string;
  /** File paths (null: not used). `tls: null` and https hosts: the system CAs. */
  readonly tls: { readonly ca: string | null; readonly cert: string | null; readonly key: string | null } | null;
  readonly auth: { readonly username: string; readonly passwordFile: string } | null;
  /** Lease TTL of the election key (15). */
  readonly leaseTtlSeconds: number;
  /** The leader stops acting when its last good renewal was sent this long ago (10000). */
  readonly renewDeadlineMs: number;
  /** Renewal and campaign period (2000). */
  readonly retryPeriodMs: number;
  /** Deadline of each unary etcd call; default renewDeadlineMs / 2. */
  readonly requestTimeoutMs?: number;
}

export const ETCD_DEFAULTS = Object.freeze({ leaseTtlSeconds: 15, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 });

/** The deadline of one unary call under these settings. */
export function requestTimeoutMs(s: Pick<EtcdSettings, 'renewDeadlineMs' | 'requestTimeoutMs'>): number {
  return s.requestTimeoutMs ?? Math.max(500, Math.floor(s.renewDeadlineMs / 2));
}

function readFileNamed(path: string, what: string): Buffer {
  let buf: Buffer;
  try {
    buf = readFileSync(path);
  } catch (e) {
    throw new LlmgwError('ETCD_CONFIG_INVALID', `cannot read the etcd ${what} file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { path, what });
  }
  if (buf.toString('utf8').trim() === '') throw new LlmgwError('ETCD_CONFIG_INVALID', `the etcd ${what} file ${path} is empty; put the ${what} in it`, { path, what });
  return buf;
}

function pemFile(path: string, what: string): Buffer {
  const buf = readFileNamed(path, what);
  if (!buf.toString('utf8').includes('-----BEGIN ')) throw new LlmgwError('ETCD_CONFIG_INVALID', `the etcd ${what} file ${path} is not PEM (no "-----BEGIN" line)`, { path, what });
  return buf;
}

/** The password in a file: its content without the final line break; never logged. */
function passwordFile(path: string): string {
  const text = readFileNamed(path, 'password').toString('utf8').replace(/\r?\n$/, '');
  if (text.includes('\n')) throw new LlmgwError('ETCD_CONFIG_INVALID', `the etcd password file ${path} holds more than one line; put the password alone on one line`, { path, what: 'password' });
  return text;
}

/** The etcd3 client options for these settings (reads the TLS and password files); deadlines from `now` (epoch ms). */
export function etcdOptions(s: EtcdSettings, now: () => number): IOptions {
  if (s.hosts.length === 0) throw new LlmgwError('ETCD_CONFIG_INVALID', 'no etcd endpoint given (--etcd URL[,URL…])');
  for (const h of s.hosts) {
    if (!/^https?:\/\/[^/\s]+\/?$/.test(h)) throw new LlmgwError('ETCD_CONFIG_INVALID', `the etcd endpoint ${JSON.stringify(h)} is not http://host:port or https://host:port`);
  }
  const timeout = requestTimeoutMs(s);
  const opts: IOptions = {
    hosts: s.hosts.map((h) => h.replace(/\/$/, '')),
    dialTimeout: timeout,
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: now() + timeout }),
    grpcOptions: {
      // etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time); 6 s leaves a margin.
      'grpc.keepalive_time_ms': 6_000,
      'grpc.keepalive_timeout_ms': Math.max(1_000, Math.min(5_000, timeout)),
      'grpc.keepalive_permit_without_calls': 0,
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': Math.max(200, s.retryPeriodMs),
    },
    faultHandling: {
      host: () => circuitBreaker(handleWhen(isRecoverableError), { halfOpenAfter: Math.max(100, Math.min(1_000, s.retryPeriodMs)), breaker: new ConsecutiveBreaker(3) }),
      global: retry(handleWhen(isRecoverableError), { maxAttempts: Math.max(1, s.hosts.length - 1) }),
      // etcd3's WatchManager calls next() on it as a factory (its own default is `new ExponentialBackoff()`); its type says IBackoff.
      watchBackoff: new ExponentialBackoff({ initialDelay: 100, maxDelay: Math.max(200, s.retryPeriodMs) }) as unknown as IBackoff<unknown>,
    },
  };
  if (s.tls) {
    const rootCertificate = s.tls.ca ? pemFile(s.tls.ca, 'CA certificate') : undefined;
    if ((s.tls.cert === null) !== (s.tls.key === null)) throw new LlmgwError('ETCD_CONFIG_INVALID', 'an etcd client certificate needs its key and the key its certificate: give both files or neither');
    const certChain = s.tls.cert ? pemFile(s.tls.cert, 'client certificate') : undefined;
    const privateKey = s.tls.key ? pemFile(s.tls.key, 'client key') : undefined;
    if (rootCertificate || certChain) {
      // etcd3 types rootCertificate as required; grpc-js takes null for "the system CAs".
      opts.credentials = { rootCertificate: rootCertificate ?? (null as unknown as Buffer), ...(certChain ? { certChain } : {}), ...(privateKey ? { privateKey } : {}) };
    }
  }
  if (s.auth) {
    if (s.auth.username.trim() === '') throw new LlmgwError('ETCD_CONFIG_INVALID', 'the etcd user name is empty');
    opts.auth = { username: s.auth.username, password: passwordFile(s.auth.passwordFile) };
  }
  return opts;
}

// grpc-js hands tls.connect an IP address as servername, which Node 26 refuses (see the file).
dropIpServername();

/** Opens the client (no I/O until the first call). Throws ETCD_CONFIG_INVALID naming a bad file. */
export function openEtcd(s: EtcdSettings, now: () => number): Etcd3 {
  return new Etcd3(etcdOptions(s, now));
}

const AUTH_ERRORS = [EtcdAuthenticationFailedError, EtcdInvalidAuthTokenError, EtcdPermissionDeniedError, EtcdUserNotFoundError, EtcdRoleNotGrantedError, GRPCUnauthenticatedError];
const UNAVAILABLE_ERRORS = [GRPCUnavailableError, GRPCDeadlineExceededError, GRPCCancelledError, EtcdWatchStreamEnded];

const TLS_TEXT = /SSL routines|certificate|self[- ]signed|wrong version number|handshake|ERR_TLS_|ERR_SSL_/i;

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Translate an etcd3/gRPC error into a catalogue reason (an LlmgwError's own reason passes through). */
export function etcdReason(e: unknown): ReasonRef {
  return etcdError(e, null);
}

/** The same as an LlmgwError to throw, with what was being done in front of the message. */
export function etcdError(e: unknown, op: string | null): LlmgwError {
  if (e instanceof LlmgwError) return e;
  const at = op ? `${op}: ` : '';
  const msg = errorText(e);
  if (AUTH_ERRORS.some((c) => e instanceof c)) return new LlmgwError('ETCD_AUTH_FAILED', `${at}etcd refused the credentials or the permission (${msg})`);
  if (UNAVAILABLE_ERRORS.some((c) => e instanceof c) || isBrokenCircuitError(e)) {
    // gRPC reports a failed TLS handshake as UNAVAILABLE; OpenSSL's and Node's texts say which.
    if (TLS_TEXT.test(msg)) return new LlmgwError('ETCD_TLS_FAILED', `${at}the TLS handshake with etcd failed (${msg})`);
    return new LlmgwError('ETCD_UNAVAILABLE', `${at}etcd did not answer (${msg})`);
  }
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|EPIPE)$/.test(code)) {
    return new LlmgwError('ETCD_UNAVAILABLE', `${at}etcd did not answer (${code})`);
  }
  if (e instanceof EtcdLeaseInvalidError) return new LlmgwError('ETCD_FAILED', `${at}the etcd lease is gone (${msg})`, { lease: 'invalid' });
  return new LlmgwError('ETCD_FAILED', `${at}${msg}`);
}
