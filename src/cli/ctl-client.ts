/**
 * `llmgw ctl`'s side of the admin API: where the controller is and how to authenticate (flags,
 * then environment, then a config file), and a small undici client that turns every failure into
 * a CtlFailure carrying a code and a hint.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { Agent, request, type Dispatcher } from 'undici';
import { usageError } from '../errors/catalogue.js';

export const DEFAULT_SERVER = 'http://127.0.0.1:8081';
export const ADMIN_PREFIX = '/admin/v1';

export interface CtlFlags {
  readonly server?: string;
  readonly token?: string;
  readonly tokenFile?: string;
  readonly config?: string;
  readonly ca?: string;
}

export interface CtlTarget {
  /** Base URL, no trailing slash. */
  readonly server: string;
  readonly token: string | null;
  /** PEM text of a CA to trust (https servers with a private CA). */
  readonly ca: string | null;
}

/** A request that did not succeed: the controller's error (code + hint) or a transport failure. */
export class CtlFailure extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly hint: string,
    /** HTTP status, or null when no answer came. */
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'CtlFailure';
  }
}

interface ConfigFile {
  server?: string;
  token?: string;
  tokenFile?: string;
  ca?: string;
}

const CONFIG_KEYS = new Set(['server', 'token', 'tokenFile', 'ca']);

function readText(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw usageError(`cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

function readConfig(path: string, required: boolean): { file: ConfigFile; dir: string } | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if (!required && (e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw usageError(`cannot read the ctl config ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw usageError(`the ctl config ${path} is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw usageError(`the ctl config ${path} must hold a JSON object {"server", "token" | "tokenFile", "ca"}`);
  for (const [k, v] of Object.entries(parsed)) {
    if (!CONFIG_KEYS.has(k)) throw usageError(`the ctl config ${path} has an unknown key "${k}" (allowed: server, token, tokenFile, ca)`);
    if (typeof v !== 'string') throw usageError(`the ctl config ${path}: "${k}" must be a string`);
  }
  return { file: parsed as ConfigFile, dir: dirname(path) };
}

const nonEmpty = (v: string | undefined): string | undefined => (v === undefined || v.trim() === '' ? undefined : v);

/** Where the controller is and how to talk to it: flags, then environment, then the config file. */
export function resolveTarget(flags: CtlFlags, env: NodeJS.ProcessEnv, cwd: string): CtlTarget {
  const explicitConfig = flags.config ?? nonEmpty(env.LLMGW_CONFIG);
  const home = nonEmpty(env.HOME);
  const defaultConfig = nonEmpty(env.XDG_CONFIG_HOME) ? join(env.XDG_CONFIG_HOME!, 'llmgw', 'ctl.json') : home ? join(home, '.config', 'llmgw', 'ctl.json') : null;
  const cfg = explicitConfig !== undefined ? readConfig(resolve(cwd, explicitConfig), true) : defaultConfig ? readConfig(defaultConfig, false) : null;
  const inConfigDir = (p: string): string => (isAbsolute(p) ? p : join(cfg!.dir, p));

  const server = (flags.server ?? nonEmpty(env.LLMGW_SERVER) ?? cfg?.file.server ?? DEFAULT_SERVER).replace(/\/+$/, '');
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw usageError(`the server address "${server}" is not a URL; give it as http://HOST:PORT or https://HOST:PORT`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw usageError(`the server address "${server}" must start with http:// or https://`);

  const tokenText = (t: string): string => t.trim();
  let token: string | null = null;
  if (flags.token !== undefined) token = tokenText(flags.token);
  else if (flags.tokenFile !== undefined) token = tokenText(readText(resolve(cwd, flags.tokenFile), 'the token file'));
  else if (nonEmpty(env.LLMGW_ADMIN_TOKEN)) token = tokenText(env.LLMGW_ADMIN_TOKEN!);
  else if (nonEmpty(env.LLMGW_ADMIN_TOKEN_FILE)) token = tokenText(readText(resolve(cwd, env.LLMGW_ADMIN_TOKEN_FILE!), 'the token file'));
  else if (cfg?.file.token !== undefined) token = tokenText(cfg.file.token);
  else if (cfg?.file.tokenFile !== undefined) token = tokenText(readText(inConfigDir(cfg.file.tokenFile), 'the token file'));
  if (token === '') token = null;

  const caPath = flags.ca !== undefined ? resolve(cwd, flags.ca) : nonEmpty(env.LLMGW_CA) ? resolve(cwd, env.LLMGW_CA!) : cfg?.file.ca !== undefined ? inConfigDir(cfg.file.ca) : null;
  const ca = caPath ? readText(caPath, 'the CA file') : null;
  return { server: url.origin + url.pathname.replace(/\/+$/, ''), token, ca };
}

const TLS_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'ERR_SSL_WRONG_VERSION_NUMBER',
]);

function errnoCode(e: unknown): string | undefined {
  let cur: unknown = e;
  for (let i = 0; i < 4 && cur; i++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string' && !c.startsWith('UND_ERR_')) return c;
    cur = (cur as { cause?: unknown }).cause;
  }
  const c = (e as { code?: unknown }).code;
  return typeof c === 'string' ? c : undefined;
}

function transportFailure(server: string, e: unknown): CtlFailure {
  const code = errnoCode(e) ?? 'ERROR';
  const detail = (e as { cause?: { message?: string } }).cause?.message ?? (e as Error).message ?? String(e);
  if (TLS_CODES.has(code)) {
    return new CtlFailure(`TLS with the controller at ${server} failed: ${detail}`, 'CTL_TLS', 'Trust the controller\'s CA with --ca FILE (or LLMGW_CA, or "ca" in the ctl config), and use the host name its certificate names.', null);
  }
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new CtlFailure(`the controller at ${server} did not answer in time`, 'CTL_TIMEOUT', 'The controller may be busy with a long pass; check its log, then try again.', null);
  }
  return new CtlFailure(
    `cannot reach the llmgw controller at ${server}: ${detail}`,
    'CTL_UNREACHABLE',
    `Is \`llmgw serve\` running with its admin API there? Point ctl at it with --server URL, LLMGW_SERVER or "server" in ~/.config/llmgw/ctl.json (default ${DEFAULT_SERVER}).`,
    null,
  );
}

export interface Answer<T> {
  readonly status: number;
  readonly body: T;
}

/** The admin API over undici. Close it when done. */
export class AdminClient {
  private readonly agent: Agent;

  constructor(readonly target: CtlTarget) {
    this.agent = new Agent({ connect: target.ca ? { ca: target.ca } : {}, keepAliveTimeout: 1_000 });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  /** For streams read beside call() (ctl events --follow). */
  get dispatcher(): Dispatcher {
    return this.agent;
  }

  /** GET/POST under /admin/v1; throws CtlFailure for transport failures and error answers. */
  async call<T>(method: 'GET' | 'POST', path: string, opts: { query?: Record<string, string>; body?: unknown; timeoutMs?: number } = {}): Promise<Answer<T>> {
    const qs = opts.query && Object.keys(opts.query).length ? `?${new URLSearchParams(opts.query).toString()}` : '';
    const url = `${this.target.server}${ADMIN_PREFIX}${path}${qs}`;
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.target.token) headers.authorization = `Bearer ${this.target.token}`;
    let body: string | undefined;
    if (opts.body !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.body);
    }
    const timeout = opts.timeoutMs ?? 30_000;
    let res: Dispatcher.ResponseData;
    let text: string;
    try {
      res = await request(url, { method, headers, body, dispatcher: this.agent, headersTimeout: timeout, bodyTimeout: timeout });
      text = await res.body.text();
    } catch (e) {
      throw transportFailure(this.target.server, e);
    }
    let parsed: unknown;
    try {
      parsed = text === '' ? null : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (res.statusCode >= 400) {
      const err = (parsed as { error?: { code?: unknown; message?: unknown; hint?: unknown } } | undefined)?.error;
      if (err && typeof err.code === 'string' && typeof err.message === 'string') {
        throw new CtlFailure(err.message, err.code, typeof err.hint === 'string' ? err.hint : '', res.statusCode);
      }
      throw new CtlFailure(
        `the server at ${this.target.server} answered HTTP ${res.statusCode}: ${text.slice(0, 200)}`,
        'CTL_BAD_ANSWER',
        'Is --server pointing at the admin API of `llmgw serve` (not the router)?',
        res.statusCode,
      );
    }
    if (parsed === undefined || parsed === null) {
      throw new CtlFailure(`the server at ${this.target.server} answered something other than JSON`, 'CTL_BAD_ANSWER', 'Is --server pointing at the admin API of `llmgw serve` (not the router)?', res.statusCode);
    }
    return { status: res.statusCode, body: parsed as T };
  }
}
