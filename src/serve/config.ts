/**
 * `llmgw serve` configuration: a small YAML/JSON file, overridden by environment variables,
 * overridden by flags. Secrets are referenced by file or env var name, never given inline.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { usageError } from '../errors/catalogue.js';
import { parseDuration, parseSize } from '../fleet-spec/units.js';
import { isLogFormat, LOG_FORMATS, type LogFormat } from './log-format.js';
import type { EtcdSettings } from '../ha/etcd.js';
import { isLoopbackListen, parseAllowedHosts } from '../util/local-only.js';

export interface Listen {
  readonly host: string;
  readonly port: number;
}

export interface ServeConfig {
  readonly fleet: { readonly url: string | null; readonly path: string | null; readonly branch: string; readonly tokenFile: string | null; readonly tokenEnv: string | null };
  readonly secretsDir: string;
  readonly stateDir: string;
  readonly router: { readonly listen: Listen; readonly auth: boolean; readonly bodyLimitBytes: number | null };
  readonly admin: { readonly listen: Listen; readonly auth: boolean; readonly tokenFile: string | null; readonly tokenEnv: string };
  readonly tls: { readonly cert: string; readonly key: string } | null;
  readonly webhookSecretFile: string | null;
  readonly logLevel: string;
  readonly logFormat: LogFormat;
  /** How long a client may take to send its headers / its whole request (router and admin API). */
  readonly clientTimeouts: { readonly headersMs: number; readonly requestMs: number };
  /** Most router requests in progress at once; null = the router's default. */
  readonly routerMaxInFlight: number | null;
  /** Deadline of each HTTP read of a model's GGUF header (memory estimates). */
  readonly sourceTimeoutMs: number;
  /** On SIGTERM: how long requests in flight (streams) may take to finish before they are cut. */
  readonly shutdownGraceMs: number;
  /** Several instances as one controller on etcd (leader election, shared state); null = one instance, state file. */
  readonly etcd: EtcdConfig | null;
  /** The usage log: one JSON line per router request (src/router/usage-log.ts); null = none. */
  readonly usageLog: { readonly path: string; readonly maxBytes: number } | null;
  /** Host names an auth-off port accepts besides loopback (and its own listen address). */
  readonly allowedHosts: readonly string[];
  /** An auth-off port listens beyond loopback because the operator forced it (a warning is logged). */
  readonly unsafeListenWithoutAuth: boolean;
}

/** --etcd and its settings: what the etcd layer opens a client and an election with. */
export type EtcdConfig = EtcdSettings;

/** Every setting: its flag, env var and config-file key (dotted). */
export const SETTINGS = {
  fleet: { flag: 'fleet', env: 'LLMGW_FLEET', key: 'fleet', help: 'fleet repo: an http(s) git URL or a local repo path' },
  branch: { flag: 'branch', env: 'LLMGW_BRANCH', key: 'branch', help: 'branch holding the desired state (default main)' },
  gitTokenFile: { flag: 'git-token-file', env: 'LLMGW_GIT_TOKEN_FILE', key: 'git_token_file', help: 'file holding the git token (https remotes)' },
  gitTokenEnv: { flag: 'git-token-env', env: 'LLMGW_GIT_TOKEN_ENV', key: 'git_token_env', help: 'name of an env var holding the git token' },
  secretsDir: { flag: 'secrets-dir', env: 'LLMGW_SECRETS_DIR', key: 'secrets_dir', help: 'directory of secrets named in the fleet repo: SSH private keys (nodes/<node>.yaml identity) and download tokens (models/<model>.yaml token) (default ./.llmgw/secrets)' },
  stateDir: { flag: 'state-dir', env: 'LLMGW_STATE_DIR', key: 'state_dir', help: 'controller state: state file, fleet repo mirror, engine key (default ./.llmgw/state)' },
  routerListen: { flag: 'router-listen', env: 'LLMGW_ROUTER_LISTEN', key: 'router_listen', help: 'router address host:port (default 127.0.0.1:8080)' },
  adminListen: { flag: 'admin-listen', env: 'LLMGW_ADMIN_LISTEN', key: 'admin_listen', help: 'admin API address host:port (default 127.0.0.1:8081)' },
  adminTokenFile: { flag: 'admin-token-file', env: 'LLMGW_ADMIN_TOKEN_FILE', key: 'admin_token_file', help: 'file holding the admin API bearer token (or env LLMGW_ADMIN_TOKEN)' },
  tlsCert: { flag: 'tls-cert', env: 'LLMGW_TLS_CERT', key: 'tls_cert', help: 'PEM certificate for HTTPS on both ports (re-read when the file changes)' },
  tlsKey: { flag: 'tls-key', env: 'LLMGW_TLS_KEY', key: 'tls_key', help: 'PEM private key for HTTPS' },
  webhookSecretFile: { flag: 'webhook-secret-file', env: 'LLMGW_WEBHOOK_SECRET_FILE', key: 'webhook_secret_file', help: 'file holding the git push webhook HMAC secret' },
  bodyLimit: { flag: 'body-limit', env: 'LLMGW_BODY_LIMIT', key: 'body_limit', help: 'largest request body the router accepts: bytes, or a size such as 16MiB (default 8 MiB)' },
  clientTimeout: { flag: 'client-timeout', env: 'LLMGW_CLIENT_TIMEOUT', key: 'client_timeout', help: 'a client must send its whole request (body included) to the router or admin API within this, else 408 and closed (default 30s)' },
  headerTimeout: { flag: 'header-timeout', env: 'LLMGW_HEADER_TIMEOUT', key: 'header_timeout', help: 'a client must send its request headers within this (default 10s)' },
  routerMaxInFlight: { flag: 'router-max-in-flight', env: 'LLMGW_ROUTER_MAX_IN_FLIGHT', key: 'router_max_in_flight', help: 'most router requests in progress at once, waiting for a model included; 503 router_overloaded above (default 1024)' },
  shutdownGrace: { flag: 'shutdown-grace', env: 'LLMGW_SHUTDOWN_GRACE', key: 'shutdown_grace', help: 'on SIGTERM the router stops accepting and lets requests in flight (streams) finish for up to this long, then cuts them with an error event (default 30s)' },
  sourceTimeout: { flag: 'source-timeout', env: 'LLMGW_SOURCE_TIMEOUT', key: 'source_timeout', help: 'deadline of each HTTP read of a model source\'s GGUF header for memory estimates (default 5s)' },
  etcd: { flag: 'etcd', env: 'LLMGW_ETCD', key: 'etcd', help: 'run as one of several instances on etcd: comma-separated endpoints such as https://10.0.0.5:2379 (leader election, shared state; default: one instance, state file)' },
  etcdPrefix: { flag: 'etcd-prefix', env: 'LLMGW_ETCD_PREFIX', key: 'etcd_prefix', help: 'key prefix in etcd; instances with the same etcd and prefix are one controller (default /llmgw)' },
  etcdCa: { flag: 'etcd-ca-file', env: 'LLMGW_ETCD_CA_FILE', key: 'etcd_ca_file', help: 'PEM CA bundle that signs the etcd servers\' certificates' },
  etcdCert: { flag: 'etcd-cert-file', env: 'LLMGW_ETCD_CERT_FILE', key: 'etcd_cert_file', help: 'PEM client certificate for etcd (with --etcd-key-file)' },
  etcdKey: { flag: 'etcd-key-file', env: 'LLMGW_ETCD_KEY_FILE', key: 'etcd_key_file', help: 'PEM private key of the etcd client certificate' },
  etcdUser: { flag: 'etcd-user', env: 'LLMGW_ETCD_USER', key: 'etcd_user', help: 'etcd user (with --etcd-password-file)' },
  etcdPasswordFile: { flag: 'etcd-password-file', env: 'LLMGW_ETCD_PASSWORD_FILE', key: 'etcd_password_file', help: 'file holding the etcd user\'s password' },
  leaseTtl: { flag: 'lease-ttl', env: 'LLMGW_LEASE_TTL', key: 'lease_ttl', help: 'leader lease: a dead leader is replaced after it (default 15s)' },
  renewDeadline: { flag: 'renew-deadline', env: 'LLMGW_RENEW_DEADLINE', key: 'renew_deadline', help: 'the leader stops acting when it has not renewed its lease for this long; below --lease-ttl (default 10s)' },
  retryPeriod: { flag: 'retry-period', env: 'LLMGW_RETRY_PERIOD', key: 'retry_period', help: 'how often the leader renews its lease and standbys try to take it (default 2s)' },
  usageLog: { flag: 'usage-log', env: 'LLMGW_USAGE_LOG', key: 'usage_log', help: 'append one JSON line per router request to this file (time, key name, model, replica, status, tokens, duration; never prompt or completion text), fsynced at least every second' },
  usageLogMaxSize: { flag: 'usage-log-max-size', env: 'LLMGW_USAGE_LOG_MAX_SIZE', key: 'usage_log_max_size', help: 'rotate the usage log to FILE.1 … FILE.5 at this size (default 64MiB)' },
  logLevel: { flag: 'log-level', env: 'LLMGW_LOG_LEVEL', key: 'log_level', help: 'pino log level (default info)' },
  allowedHosts: { flag: 'allowed-hosts', env: 'LLMGW_ALLOWED_HOSTS', key: 'allowed_hosts', help: 'with authentication off, Host names (comma-separated) served besides loopback; a request with another Host or a web page\'s Origin elsewhere gets 403 (default: loopback only)' },
  logFormat: { flag: 'log-format', env: 'LLMGW_LOG_FORMAT', key: 'log_format', help: 'json, pretty (readable lines) or auto: pretty when stdout is a terminal (default auto)' },
} as const;

export type SettingName = keyof typeof SETTINGS;

export function parseListen(name: string, v: string): Listen {
  const m = /^(?:\[([0-9a-fA-F:]+)\]|([^:]+)):(\d{1,5})$/.exec(v.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw usageError(`${name} must be host:port (got ${JSON.stringify(v)})`);
  return { host: m[1] ?? m[2] ?? '127.0.0.1', port };
}

export function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw usageError(`--config ${path}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const v = parseYaml(text) as unknown;
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw usageError(`--config ${path}: expected a mapping of settings`);
  const known = new Set(Object.values(SETTINGS).map((s) => s.key as string).concat(['no_router_auth', 'no_admin_auth', 'unsafe_listen_without_auth']));
  for (const k of Object.keys(v)) if (!known.has(k)) throw usageError(`--config ${path}: unknown setting "${k}" (known: ${[...known].sort().join(', ')})`);
  return v as Record<string, unknown>;
}

export interface ConfigSources {
  readonly flags: Partial<Record<SettingName, string>> & { readonly noRouterAuth?: boolean; readonly noAdminAuth?: boolean; readonly unsafeListenWithoutAuth?: boolean };
  readonly env: NodeJS.ProcessEnv;
  readonly file: Record<string, unknown>;
  readonly cwd: string;
}

export function resolveConfig(src: ConfigSources): ServeConfig {
  const get = (name: SettingName): string | null => {
    const s = SETTINGS[name];
    const v = src.flags[name] ?? src.env[s.env] ?? src.file[s.key];
    return v === undefined || v === null || v === '' ? null : String(v);
  };
  const abs = (p: string | null): string | null => (p === null ? null : resolve(src.cwd, p));
  const fleet = get('fleet');
  if (!fleet) throw usageError('no fleet repo: give --fleet URL|PATH (or LLMGW_FLEET, or fleet: in the config file)');
  const isUrl = /^https?:\/\//.test(fleet);
  const certPath = abs(get('tlsCert'));
  const keyPath = abs(get('tlsKey'));
  if ((certPath === null) !== (keyPath === null)) throw usageError('--tls-cert and --tls-key go together');
  const body = get('bodyLimit');
  const bodyLimitBytes = body === null ? null : parseSize(body);
  if (body !== null && !bodyLimitBytes) throw usageError(`--body-limit must be a size of at least 1 byte, such as 16MiB or 1048576 (got ${JSON.stringify(body)})`);
  const logFormat = get('logFormat') ?? 'auto';
  if (!isLogFormat(logFormat)) throw usageError(`--log-format must be one of ${LOG_FORMATS.join(', ')} (got ${JSON.stringify(logFormat)})`);
  const duration = (name: SettingName, dflt: number): number => {
    const v = get(name);
    if (v === null) return dflt;
    const ms = parseDuration(v);
    if (!ms || ms <= 0) throw usageError(`--${SETTINGS[name].flag} must be a duration such as 30s or 500ms (got ${JSON.stringify(v)})`);
    return ms;
  };
  const requestMs = duration('clientTimeout', 30_000);
  const headersMs = Math.min(duration('headerTimeout', 10_000), requestMs);
  const maxInFlightRaw = get('routerMaxInFlight');
  const routerMaxInFlight = maxInFlightRaw === null ? null : Number(maxInFlightRaw);
  if (routerMaxInFlight !== null && (!Number.isSafeInteger(routerMaxInFlight) || routerMaxInFlight < 1)) throw usageError(`--router-max-in-flight must be a whole number of at least 1 (got ${JSON.stringify(maxInFlightRaw)})`);
  const truthy = (v: unknown): boolean => v === true || v === 'true' || v === '1';
  const usageLogPath = abs(get('usageLog'));
  const usageMax = get('usageLogMaxSize');
  const usageMaxBytes = usageMax === null ? 64 * 1024 * 1024 : parseSize(usageMax);
  if (usageMax !== null && (!usageMaxBytes || usageMaxBytes < 4096)) throw usageError(`--usage-log-max-size must be a size of at least 4KiB, such as 64MiB (got ${JSON.stringify(usageMax)})`);
  if (usageMax !== null && usageLogPath === null) throw usageError('--usage-log-max-size needs --usage-log FILE');
  const allowed = parseAllowedHosts(get('allowedHosts') ?? '');
  if (allowed.bad !== null) throw usageError(`--allowed-hosts takes host names or addresses, comma-separated, such as llm.lan,10.0.0.5 (got ${JSON.stringify(allowed.bad)})`);
  const unsafeListenWithoutAuth = Boolean(src.flags.unsafeListenWithoutAuth || truthy(src.env.LLMGW_UNSAFE_LISTEN_WITHOUT_AUTH) || truthy(src.file.unsafe_listen_without_auth));
  const routerListen = parseListen('--router-listen', get('routerListen') ?? '127.0.0.1:8080');
  const adminListen = parseListen('--admin-listen', get('adminListen') ?? '127.0.0.1:8081');
  const routerAuth = !(src.flags.noRouterAuth || truthy(src.env.LLMGW_NO_ROUTER_AUTH) || truthy(src.file.no_router_auth));
  const adminAuth = !(src.flags.noAdminAuth || truthy(src.env.LLMGW_NO_ADMIN_AUTH) || truthy(src.file.no_admin_auth));
  // auth off means this machine only: a listener beyond loopback needs the operator to force it (#36, N7)
  for (const [what, auth, listen, flag] of [['router', routerAuth, routerListen, '--no-router-auth'], ['admin API', adminAuth, adminListen, '--no-admin-auth']] as const) {
    if (!auth && !isLoopbackListen(listen.host) && !unsafeListenWithoutAuth) {
      throw usageError(`the ${what} has authentication off (${flag} or --local) and would listen on ${listen.host}, beyond this machine: listen on 127.0.0.1, turn authentication on, or force it with --unsafe-listen-without-auth`);
    }
  }
  return {
    allowedHosts: allowed.hosts,
    unsafeListenWithoutAuth,
    etcd: etcdConfig(get, duration, abs),
    fleet: { url: isUrl ? fleet : null, path: isUrl ? null : abs(fleet), branch: get('branch') ?? 'main', tokenFile: abs(get('gitTokenFile')), tokenEnv: get('gitTokenEnv') },
    secretsDir: abs(get('secretsDir')) ?? resolve(src.cwd, '.llmgw/secrets'),
    stateDir: abs(get('stateDir')) ?? resolve(src.cwd, '.llmgw/state'),
    router: {
      listen: routerListen,
      auth: routerAuth,
      bodyLimitBytes,
    },
    admin: {
      listen: adminListen,
      auth: adminAuth,
      tokenFile: abs(get('adminTokenFile')),
      tokenEnv: 'LLMGW_ADMIN_TOKEN',
    },
    tls: certPath && keyPath ? { cert: certPath, key: keyPath } : null,
    webhookSecretFile: abs(get('webhookSecretFile')),
    logLevel: get('logLevel') ?? 'info',
    logFormat,
    clientTimeouts: { headersMs, requestMs },
    routerMaxInFlight,
    sourceTimeoutMs: duration('sourceTimeout', 5_000),
    shutdownGraceMs: duration('shutdownGrace', 30_000),
    usageLog: usageLogPath === null ? null : { path: usageLogPath, maxBytes: usageMaxBytes! },
  };
}

function etcdConfig(get: (n: SettingName) => string | null, duration: (n: SettingName, dflt: number) => number, abs: (p: string | null) => string | null): EtcdConfig | null {
  const list = get('etcd');
  const etcdOnly: SettingName[] = ['etcdPrefix', 'etcdCa', 'etcdCert', 'etcdKey', 'etcdUser', 'etcdPasswordFile', 'leaseTtl', 'renewDeadline', 'retryPeriod'];
  if (list === null) {
    const stray = etcdOnly.find((n) => get(n) !== null);
    if (stray) throw usageError(`--${SETTINGS[stray].flag} needs --etcd (the etcd endpoints)`);
    return null;
  }
  const hosts = list.split(',').map((h) => h.trim()).filter((h) => h !== '');
  for (const h of hosts) if (!/^https?:\/\/[^/\s]+$/.test(h)) throw usageError(`--etcd takes endpoints such as http://127.0.0.1:2379 or https://etcd-1:2379, comma-separated (got ${JSON.stringify(h)})`);
  if (hosts.length === 0) throw usageError('--etcd is empty: give at least one endpoint such as http://127.0.0.1:2379');
  const prefix = (get('etcdPrefix') ?? '/llmgw').replace(/\/+$/, '');
  if (!/^\/[A-Za-z0-9._/-]{0,127}$/.test(prefix) || prefix === '') throw usageError(`--etcd-prefix must start with /, hold letters, digits, . _ - / and be at most 128 characters (got ${JSON.stringify(get('etcdPrefix'))})`);
  const [ca, cert, key] = [abs(get('etcdCa')), abs(get('etcdCert')), abs(get('etcdKey'))];
  if ((cert === null) !== (key === null)) throw usageError('--etcd-cert-file and --etcd-key-file go together');
  const user = get('etcdUser');
  const passwordFile = abs(get('etcdPasswordFile'));
  if ((user === null) !== (passwordFile === null)) throw usageError('--etcd-user and --etcd-password-file go together');
  const leaseTtlMs = duration('leaseTtl', 15_000);
  const renewDeadlineMs = duration('renewDeadline', 10_000);
  const retryPeriodMs = duration('retryPeriod', 2_000);
  if (leaseTtlMs % 1000 !== 0 || leaseTtlMs < 2000) throw usageError(`--lease-ttl must be whole seconds, at least 2s (got ${get('leaseTtl')})`);
  if (renewDeadlineMs >= leaseTtlMs) throw usageError(`--renew-deadline (${renewDeadlineMs} ms) must be below --lease-ttl (${leaseTtlMs} ms): the leader must stop acting before its lease can expire`);
  if (retryPeriodMs >= renewDeadlineMs) throw usageError(`--retry-period (${retryPeriodMs} ms) must be below --renew-deadline (${renewDeadlineMs} ms): a renewal must get several tries`);
  return {
    hosts,
    prefix,
    tls: ca || cert || key || hosts.some((h) => h.startsWith('https:')) ? { ca, cert, key } : null,
    auth: user && passwordFile ? { username: user, passwordFile } : null,
    leaseTtlSeconds: leaseTtlMs / 1000,
    renewDeadlineMs,
    retryPeriodMs,
  };
}
